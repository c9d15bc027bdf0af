# gpu-extender: a GPU scheduler extender for Kubernetes, in C.
#
#   make            build build/gpu-extender, build/gpu-agent and build/kubectl-gpu
#   make run        serve the bundled demo inventory on 127.0.0.1:$(PORT), /debug/nodes on $(DEBUG_PORT)
#   make test       unit tests (ASan+UBSan, threads under TSan), fuzzing, black-box tests
#                   (normal and ASan+UBSan builds), then e2e
#   make fuzz       the libFuzzer targets, 10 minutes each
#   make bench      latency and throughput of filter+prioritize
#   make bench-http-scale
#                   filter+prioritize over HTTP at 65000 nodes and 520k allocations, as
#                   kube-scheduler sends them there (5 % of the nodes), and the server's RSS
#   make bench-e2e  GPU pods per second placed by kube-scheduler, alone and with the
#                   extender, on the test harness's control plane, in interleaved rounds
#                   (BENCH_E2E_ARGS, e.g. "--nodes 5000 --rounds 3"; "--peers" adds
#                   gpushare and HAMi's extender, built by bench/peers/build.sh; "--keep-curve"
#                   the rows keep-1/2/4/8 and the soft preferences each still honours; "--mixed"
#                   plain and extender on a mixed workload: whole GPUs of 1/2/4/8, shares,
#                   a topology claim, gangs)
#   make bench-sustained
#                   30 minutes (SUSTAINED_S) of create/bind/delete rounds at 1000 nodes: the
#                   extender's RSS, open files, threads and verb times, minute by minute
#   make sim        regenerate docs/simulation.md from the openb traces
#   make dst        the deterministic simulation of the reservation protocol (a phase of
#                   `make test`); `make soak SEEDS=N` runs N more seeds

PORT ?= 8888
DEBUG_PORT ?= $(shell echo $$(($(PORT) + 1)))
CC ?= cc
BUILD := build

# Reasons and log fields are cut to their buffers on purpose (snprintf), so
# format-truncation is the one warning left off.
WARN := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes \
	-Wmissing-prototypes -Wvla -Wimplicit-fallthrough -Wno-format-truncation
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude -Isrc/proto -pthread $(CFLAGS)
LIBS := -lmicrohttpd -lgnutls -lcjson -lcurl -lssl -lcrypto -lyaml -lm -pthread
# The node agent also speaks gRPC to the kubelet (HTTP/2 and protobuf).
AGENT_LIBS := -lnghttp2 -lprotobuf-c
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# Every module but the two programs' entry points goes into one library.
MAINS := src/main.c src/agentd/agent_main.c src/kubectl/kgpu_main.c
# The reservation storage behind src/reserve/store.h: the API server's Leases
# (store.c); another storage is a src/reserve/store_<name>.c named here.
RESERVE_STORE ?= src/reserve/store.c
OTHER_STORES := $(filter-out $(RESERVE_STORE),$(wildcard src/reserve/store*.c))
LIB_SRCS := $(filter-out $(MAINS) $(OTHER_STORES),$(shell find src -name '*.c' | sort))
HDRS := $(wildcard include/*.h src/*/*.h)
# Tests and the simulator reach a module's private headers (src/MODULE/*.h)
# by name; the modules themselves include only their own and include/.
TEST_INC := $(patsubst %/,-I%,$(sort $(dir $(wildcard src/*/*.h))))
UNIT_SRCS := $(wildcard test/unit/test_*.c)

OBJ := $(BUILD)/obj
SOBJ := $(BUILD)/asan
TOBJ := $(BUILD)/tsan
LIB_OBJS := $(LIB_SRCS:%.c=$(OBJ)/%.o)
SLIB_OBJS := $(LIB_SRCS:%.c=$(SOBJ)/%.o)
UNIT_BINS := $(UNIT_SRCS:test/unit/%.c=$(BUILD)/test/%)

# The version: the VERSION file, the same for both programs and the image's
# tag (make image); the commit is printed beside it. The stamp changes only
# when either does, so a commit (or an edit after one) rebuilds the objects
# that print them and nothing else.
VERSION := $(shell cat VERSION 2>/dev/null || echo dev)
COMMIT := $(shell git describe --always --dirty --exclude='*' 2>/dev/null || echo unknown)
VERSION_STAMP := $(BUILD)/.version
$(shell mkdir -p $(BUILD); echo '$(VERSION) $(COMMIT)' | cmp -s - $(VERSION_STAMP) || echo '$(VERSION) $(COMMIT)' > $(VERSION_STAMP))
ALL_CFLAGS += -DGPU_VERSION='"$(VERSION)"'
# The objects that print them, in each build (normal, ASan, TSan).
VERSIONED := $(foreach d,$(OBJ) $(SOBJ) $(TOBJ),$(foreach f,src/serve src/main src/agentd/agent_main src/agent/gns src/agentd/run,$(d)/$(f).o))
$(VERSIONED): ALL_CFLAGS += -DGPU_COMMIT='"$(COMMIT)"'

# Debian packages the build needs, and those only the tests need; each set
# is installed when missing (apt-get as root, else sudo).
BUILD_PKGS := libmicrohttpd-dev libgnutls28-dev libcjson-dev libcurl4-openssl-dev libssl-dev libyaml-dev pkg-config \
	libnghttp2-dev libprotobuf-c-dev
TEST_PKGS := libcmocka-dev openssl curl python3 wrk \
	procps runc containernetworking-plugins busybox-static iproute2 mount kmod ca-certificates \
	prometheus chromium
DEPS_STAMP := $(BUILD)/.deps-build
TEST_DEPS_STAMP := $(BUILD)/.deps-test

.PHONY: all deps run test structure unit dst soak blackbox e2e e2e-k8s-newest bench bench-http-scale bench-e2e bench-sustained sim fuzz proto clean image
all: $(BUILD)/gpu-extender $(BUILD)/gpu-agent $(BUILD)/kubectl-gpu

define install_missing
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null \
		| grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing: $$missing"; \
		if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
			$$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@mkdir -p $(BUILD) && touch $@
endef

deps: $(DEPS_STAMP) $(TEST_DEPS_STAMP)
$(DEPS_STAMP):
	$(call install_missing,$(BUILD_PKGS))
# Also when the Makefile changes: a package added to a list is installed on machines set up before.
# After the build's packages: two apt-get at once (make -j) fail on apt's lock.
$(TEST_DEPS_STAMP): Makefile | $(DEPS_STAMP)
	$(call install_missing,$(TEST_PKGS))

$(OBJ)/%.o: %.c $(HDRS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(ALL_CFLAGS) -c $< -o $@

$(SOBJ)/%.o: %.c $(HDRS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC-SAN  $<"
	@$(CC) $(ALL_CFLAGS) -O1 $(SAN) -c $< -o $@

$(VERSIONED): $(VERSION_STAMP)

$(BUILD)/libgpu.a: $(LIB_OBJS)
	@rm -f $@ && ar rcs $@ $^

$(BUILD)/libgpu-asan.a: $(SLIB_OBJS)
	@rm -f $@ && ar rcs $@ $^

$(BUILD)/gpu-extender: $(OBJ)/src/main.o $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/gpu-agent: $(OBJ)/src/agentd/agent_main.o $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS) $(AGENT_LIBS)

# The kubectl plugin (docs/kubectl-gpu.md): the kube client, the API decoders and the scoring core.
$(BUILD)/kubectl-gpu: $(OBJ)/src/kubectl/kgpu_main.o $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/test/%: test/unit/%.c $(wildcard test/unit/*.h) $(BUILD)/libgpu-asan.a | $(TEST_DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  LD-SAN  $@"
	@$(CC) $(ALL_CFLAGS) -O1 $(SAN) -Itest/unit $(TEST_INC) -o $@ $< $(BUILD)/libgpu-asan.a $(LIBS) $(AGENT_LIBS) -lcmocka

run: $(BUILD)/gpu-extender
	$(BUILD)/gpu-extender serve --inventory config/demo-inventory.json \
		--config config/extender.yaml --listen 127.0.0.1:$(PORT) --debug-listen 127.0.0.1:$(DEBUG_PORT)

# Each phase prints its duration; any failure stops the run.
test: all $(UNIT_BINS)
	@test/run-phase.sh structure $(MAKE) --no-print-directory structure
	@test/run-phase.sh unit $(MAKE) --no-print-directory unit tsan
	@test/run-phase.sh dst $(MAKE) --no-print-directory dst
	@test/run-phase.sh fuzz $(MAKE) --no-print-directory fuzz-ci
	@test/run-phase.sh blackbox $(MAKE) --no-print-directory blackbox
	@test/run-phase.sh e2e $(MAKE) --no-print-directory e2e
	@test/run-phase.sh e2e-k8s-newest $(MAKE) --no-print-directory e2e-k8s-newest

unit: $(UNIT_BINS)
	@test/unit/run.sh $(UNIT_BINS)

blackbox: all $(SOBJ)/gpu-extender $(SOBJ)/gpu-agent | $(TEST_DEPS_STAMP)
	@python3 test/blackbox/run.py $(BUILD)/gpu-extender
	@test/agent/run.sh $(BUILD)/gpu-agent
	@python3 test/sim/check_expected.py $(BUILD)/gpu-extender
	@test/blackbox/asan.sh $(SOBJ)/gpu-extender $(SOBJ)/gpu-agent

e2e: all | $(TEST_DEPS_STAMP)
	@test/e2e/run.sh

# `make e2e` runs on the oldest Kubernetes supported (test/cluster/versions.env);
# the suites that depend most on the release run again on the newest
# (test/cluster/versions/, built and cached beside it).
E2E_K8S_NEWEST ?= v1.37.2
E2E_K8S_SUITES ?= test/e2e/install.sh test/e2e/node.sh test/e2e/gang.sh
e2e-k8s-newest: all | $(TEST_DEPS_STAMP)
	@K8S_VERSION=$(E2E_K8S_NEWEST) test/e2e/run.sh $(E2E_K8S_SUITES)

bench: $(BUILD)/gpu-extender $(BUILD)/bench | $(TEST_DEPS_STAMP)
	@$(BUILD)/bench --extender $(BUILD)/gpu-extender
	@echo
	@$(BUILD)/bench --scale
	@echo
	@$(BUILD)/bench --scale --busy

bench-http-scale: $(BUILD)/gpu-extender $(BUILD)/bench | $(TEST_DEPS_STAMP)
	@$(BUILD)/bench --http-scale --extender $(BUILD)/gpu-extender

bench-e2e: all | $(TEST_DEPS_STAMP)
	@bench/e2e.sh --extender $(BUILD)/gpu-extender $(BENCH_E2E_ARGS)

SUSTAINED_S ?= 1800
bench-sustained: all
	@bench/e2e.sh --sustained $(SUSTAINED_S) --nodes 1000 --pods 400 --extender $(BUILD)/gpu-extender

$(BUILD)/bench: bench/bench.c $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libgpu.a $(LIBS)

# ---- Deterministic simulation of the reservation protocol (docs/testing.md) ----
# Seeds of DST_STEPS steps each, with the fault kinds of DST_FAULTS ("default":
# all but those that find the open bugs; `build/dst --help` lists them), then
# a few hundred of them again under ASan+UBSan, then seeds with the shortest
# bind timeout the extender takes (3 s: binds slower than it, against
# reapers that may call their reservations late). A failing seed prints the
# command that replays it.
DST_SRCS := $(wildcard test/dst/*.c)
DST_SEEDS ?= 1-2000
DST_ASAN_SEEDS ?= 1-300
DST_STEPS ?= 200
DST_SHORT_SEEDS ?= 1-1000
DST_FAULTS ?= default
SEEDS ?= 20000
SOAK_FROM ?= 100001
$(BUILD)/dst: $(DST_SRCS) test/dst/dst.h $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) $(TEST_INC) -o $@ $(DST_SRCS) $(BUILD)/libgpu.a $(LIBS)
$(SOBJ)/dst: $(DST_SRCS) test/dst/dst.h $(BUILD)/libgpu-asan.a
	@echo "  LD-SAN  $@"
	@$(CC) $(ALL_CFLAGS) $(TEST_INC) -O1 $(SAN) -o $@ $(DST_SRCS) $(BUILD)/libgpu-asan.a $(LIBS)
# The tree's shape: file names, public headers, who may include whom
# (test/structure/layers; docs/architecture.md, "Layers").
structure:
	@python3 test/structure/check.py

dst: $(BUILD)/dst $(SOBJ)/dst
	@$(BUILD)/dst --seeds $(DST_SEEDS) --steps $(DST_STEPS) --faults $(DST_FAULTS)
	@$(SOBJ)/dst --seeds $(DST_ASAN_SEEDS) --steps $(DST_STEPS) --faults $(DST_FAULTS)
	@$(BUILD)/dst --seeds $(DST_SHORT_SEEDS) --steps 300 --bind-timeout 3 --faults $(DST_FAULTS)
soak: $(BUILD)/dst
	@$(BUILD)/dst --seeds $(SOAK_FROM)-$$(($(SOAK_FROM) + $(SEEDS) - 1)) --steps $(DST_STEPS) --faults $(DST_FAULTS)

# The openb traces (all of them; test/data has the subset the tests use).
DATA ?= ../shared/data
sim: $(BUILD)/gpu-extender
	@SIM_DATA=$(DATA) bench/simulation-report.sh $(BUILD)/gpu-extender

# ---- Fuzzing and sanitizers (docs/testing.md) ---------------------------------
# libFuzzer targets (clang; ASan+UBSan), one per kind of outside input, with
# their seeds in test/fuzz/corpus-<target>. `make fuzz-ci` (the fuzz phase of
# `make test`) runs each over its seeds, then FUZZ_TIME seconds; `make fuzz`
# runs FUZZ_LONG seconds each (FUZZ_TARGETS=watch for one). New inputs go to
# build/fuzz/corpus/<target>, never into the committed seeds.
FUZZ_TARGETS ?= extender webhook watch kubeconfig inventory agent devplugin pod sim
FUZZ_TIME ?= 5
FUZZ_LONG ?= 600
# clang knows no -Wformat-truncation; the rest of WARN holds as with gcc.
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE $(filter-out -Wno-format-truncation,$(WARN)) -Iinclude -Isrc/proto \
	-DGPU_VERSION='"fuzz"' -g -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
FOBJ := $(BUILD)/fuzz/obj
FUZZ_BINS := $(FUZZ_TARGETS:%=$(BUILD)/fuzz/fuzz_%)
CLANG_STAMP := $(BUILD)/.deps-clang

$(CLANG_STAMP):
	$(call install_missing,clang libclang-rt-14-dev)

# The library once with coverage instrumentation; each target links it.
$(FOBJ)/%.o: %.c $(HDRS) | $(DEPS_STAMP) $(CLANG_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC-FUZZ $<"
	@clang $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(BUILD)/libgpu-fuzz.a: $(LIB_SRCS:%.c=$(FOBJ)/%.o)
	@rm -f $@ && ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: test/fuzz/fuzz_%.c test/fuzz/fuzz.h $(BUILD)/libgpu-fuzz.a
	@echo "  LD-FUZZ $@"
	@clang $(FUZZ_CFLAGS) $(TEST_INC) -fsanitize=fuzzer -o $@ $< $(BUILD)/libgpu-fuzz.a $(LIBS) $(AGENT_LIBS)

.PHONY: fuzz-ci tsan
fuzz-ci: $(FUZZ_BINS)
	@nice test/fuzz/run.sh $(FUZZ_TIME) $(FUZZ_TARGETS)
fuzz: $(FUZZ_BINS)
	@nice test/fuzz/run.sh $(FUZZ_LONG) $(FUZZ_TARGETS)

# The two programs built with ASan+UBSan: `make blackbox` runs its suites on them too.
$(SOBJ)/gpu-extender: $(SOBJ)/src/main.o $(BUILD)/libgpu-asan.a
	@echo "  LD-SAN  $@"
	@$(CC) $(ALL_CFLAGS) -O1 $(SAN) -o $@ $^ $(LIBS)
$(SOBJ)/gpu-agent: $(SOBJ)/src/agentd/agent_main.o $(BUILD)/libgpu-asan.a
	@echo "  LD-SAN  $@"
	@$(CC) $(ALL_CFLAGS) -O1 $(SAN) -o $@ $^ $(LIBS) $(AGENT_LIBS)

# ThreadSanitizer: the unit tests that start threads, on a TSan build of the
# library (part of the unit phase of `make test`).
TSAN_TESTS := test_backlog test_events test_nudge test_intern test_cache test_extender test_devplugin test_agent_publish test_httpd test_ledger test_nodesum
TSAN_FLAGS := -O1 -fsanitize=thread -fno-omit-frame-pointer
$(TOBJ)/%.o: %.c $(HDRS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC-TSAN $<"
	@$(CC) $(ALL_CFLAGS) $(TSAN_FLAGS) -c $< -o $@
$(BUILD)/libgpu-tsan.a: $(LIB_SRCS:%.c=$(TOBJ)/%.o)
	@rm -f $@ && ar rcs $@ $^
TSAN_LD = @mkdir -p $(dir $@) && echo "  LD-TSAN $@" && \
	$(CC) $(ALL_CFLAGS) $(TSAN_FLAGS) -Itest/unit $(TEST_INC) -o $@ $< $(BUILD)/libgpu-tsan.a $(LIBS) $(AGENT_LIBS) -lcmocka
$(TOBJ)/test/%: test/unit/%.c $(wildcard test/unit/*.h) $(BUILD)/libgpu-tsan.a | $(TEST_DEPS_STAMP)
	$(TSAN_LD)
# Cluster mode's reflectors have no unit test; this one exists for TSan.
$(TOBJ)/test/%: test/fuzz/%.c $(wildcard test/unit/*.h) $(BUILD)/libgpu-tsan.a | $(TEST_DEPS_STAMP)
	$(TSAN_LD)
tsan: $(TSAN_TESTS:%=$(TOBJ)/test/%) $(TOBJ)/test/tsan_reflector
	@test/fuzz/tsan.sh $^
# ---- end of fuzzing and sanitizers -------------------------------------------

# The kubelet APIs' protobuf-c code (committed) from the k8s.io/kubelet module's .proto files.
proto:
	@src/proto/gen.sh

clean:
	rm -rf $(BUILD)

# The product's image, with no container engine (deploy/image/oci.sh): an
# OCI archive build/image/gpu-extender-$(VERSION).tar of the programs,
# named gpu-extender:$(VERSION), the tag deploy/ names.
image: all
	@deploy/image/oci.sh $(BUILD)

# A one-machine cluster to try it out: the e2e control plane, this machine as
# a real kubelet node with 8 fake GPUs (FAKE_NODES=N adds fake nodes), and
# deploy/ installed by `kubectl apply -k` (through test/node/local) with the
# image of `make image` imported into its containerd (test/node/local-cluster.sh;
# needs root). Runs in the background; the last line is the `export KUBECONFIG=...` to use.
FAKE_NODES ?= 0
.PHONY: cluster cluster-down
cluster: image | $(TEST_DEPS_STAMP)
	@FAKE_NODES=$(FAKE_NODES) test/node/local-cluster.sh up

cluster-down:
	@test/node/local-cluster.sh down
