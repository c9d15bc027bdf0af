# gpu-extender: a GPU scheduler extender for Kubernetes, in C.
#
#   make            build build/gpu-extender and build/gpu-agent
#   make run        serve the bundled demo inventory on 127.0.0.1:$(PORT)
#   make test       unit tests (ASan+UBSan), black-box tests, then e2e
#   make bench      latency and throughput of filter+prioritize
#   make sim        regenerate docs/simulation.md from the openb traces

PORT ?= 8888
CC ?= cc
BUILD := build

# Reasons and log fields are cut to their buffers on purpose (snprintf), so
# format-truncation is the one warning left off.
WARN := -Wall -Wextra -Werror -Wshadow -Wformat=2 -Wstrict-prototypes \
	-Wmissing-prototypes -Wvla -Wimplicit-fallthrough -Wno-format-truncation
CFLAGS ?= -O2 -g
ALL_CFLAGS := -std=c11 -D_GNU_SOURCE $(WARN) -Iinclude -Isrc/proto -pthread $(CFLAGS)
LIBS := -lmicrohttpd -lcjson -lcurl -lssl -lcrypto -lyaml -lm -pthread
# The node agent also speaks gRPC to the kubelet (HTTP/2 and protobuf).
AGENT_LIBS := -lnghttp2 -lprotobuf-c
SAN := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all

# Every module but the two programs' entry points goes into one library.
MAINS := src/main.c src/agent/main.c
LIB_SRCS := $(filter-out $(MAINS),$(shell find src -name '*.c' | sort))
HDRS := $(wildcard include/*.h src/*/*.h)
UNIT_SRCS := $(wildcard test/unit/test_*.c)

OBJ := $(BUILD)/obj
SOBJ := $(BUILD)/asan
LIB_OBJS := $(LIB_SRCS:%.c=$(OBJ)/%.o)
SLIB_OBJS := $(LIB_SRCS:%.c=$(SOBJ)/%.o)
UNIT_BINS := $(UNIT_SRCS:test/unit/%.c=$(BUILD)/test/%)

# The version stamp changes only when the version does, so a commit (or an
# edit after one) rebuilds the two objects that print it and nothing else.
VERSION := $(shell git describe --always --dirty 2>/dev/null || echo dev)
VERSION_STAMP := $(BUILD)/.version
$(shell mkdir -p $(BUILD); echo '$(VERSION)' | cmp -s - $(VERSION_STAMP) || echo '$(VERSION)' > $(VERSION_STAMP))
$(OBJ)/src/serve.o $(OBJ)/src/main.o $(SOBJ)/src/serve.o: ALL_CFLAGS += -DGPU_VERSION='"$(VERSION)"'

# Debian packages the build needs, and those only the tests need; each set
# is installed when missing (apt-get as root, else sudo).
BUILD_PKGS := libmicrohttpd-dev libcjson-dev libcurl4-openssl-dev libssl-dev libyaml-dev pkg-config \
	libnghttp2-dev libprotobuf-c-dev
TEST_PKGS := libcmocka-dev openssl curl python3 wrk \
	procps runc containernetworking-plugins busybox-static iproute2 mount kmod ca-certificates
DEPS_STAMP := $(BUILD)/.deps-build
TEST_DEPS_STAMP := $(BUILD)/.deps-test

.PHONY: all deps run test unit blackbox e2e bench sim fuzz proto clean
all: $(BUILD)/gpu-extender $(BUILD)/gpu-agent

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
$(TEST_DEPS_STAMP):
	$(call install_missing,$(TEST_PKGS))

$(OBJ)/%.o: %.c $(HDRS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(ALL_CFLAGS) -c $< -o $@

$(SOBJ)/%.o: %.c $(HDRS) | $(DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  CC-SAN  $<"
	@$(CC) $(ALL_CFLAGS) -O1 $(SAN) -c $< -o $@

$(OBJ)/src/serve.o $(OBJ)/src/main.o $(SOBJ)/src/serve.o: $(VERSION_STAMP)

$(BUILD)/libgpu.a: $(LIB_OBJS)
	@ar rcs $@ $^

$(BUILD)/libgpu-asan.a: $(SLIB_OBJS)
	@ar rcs $@ $^

$(BUILD)/gpu-extender: $(OBJ)/src/main.o $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS)

$(BUILD)/gpu-agent: $(OBJ)/src/agent/main.o $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $^ $(LIBS) $(AGENT_LIBS)

$(BUILD)/test/%: test/unit/%.c $(wildcard test/unit/*.h) $(BUILD)/libgpu-asan.a | $(TEST_DEPS_STAMP)
	@mkdir -p $(dir $@)
	@echo "  LD-SAN  $@"
	@$(CC) $(ALL_CFLAGS) -O1 $(SAN) -Itest/unit -o $@ $< $(BUILD)/libgpu-asan.a $(LIBS) $(AGENT_LIBS) -lcmocka

run: $(BUILD)/gpu-extender
	$(BUILD)/gpu-extender serve --inventory config/demo-inventory.json \
		--config config/extender.yaml --listen 127.0.0.1:$(PORT)

# Each phase prints its duration; any failure stops the run.
test: all $(UNIT_BINS)
	@test/run-phase.sh unit $(MAKE) --no-print-directory unit
	@test/run-phase.sh blackbox $(MAKE) --no-print-directory blackbox
	@test/run-phase.sh e2e $(MAKE) --no-print-directory e2e

unit: $(UNIT_BINS)
	@test/unit/run.sh $(UNIT_BINS)

blackbox: all | $(TEST_DEPS_STAMP)
	@python3 test/blackbox/run.py $(BUILD)/gpu-extender
	@test/agent/run.sh $(BUILD)/gpu-agent
	@python3 test/sim/check_expected.py $(BUILD)/gpu-extender

e2e: all
	@test/e2e/run.sh

bench: $(BUILD)/gpu-extender $(BUILD)/bench | $(TEST_DEPS_STAMP)
	@$(BUILD)/bench --extender $(BUILD)/gpu-extender

$(BUILD)/bench: bench/bench.c $(BUILD)/libgpu.a
	@echo "  LD      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libgpu.a $(LIBS)

# The openb traces (all of them; test/data has the subset the tests use).
DATA ?= ../shared/data
sim: $(BUILD)/gpu-extender
	@SIM_DATA=$(DATA) bench/simulation-report.sh $(BUILD)/gpu-extender

# libFuzzer targets (clang); not part of `make test`. Run: build/fuzz_agent -max_total_time=60
FUZZ_AGENT_SRCS := test/fuzz/fuzz_agent.c $(wildcard src/agent/nvsmi.c src/agent/rocm.c src/agent/intel.c \
	src/agent/arch.c src/agent/islands.c src/agent/node.c src/agent/text.c) src/util/strnum.c src/core/gpu.c
fuzz: $(BUILD)/fuzz_agent $(BUILD)/fuzz_extender
$(BUILD)/fuzz_agent: $(FUZZ_AGENT_SRCS) $(HDRS)
	@command -v clang >/dev/null || apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc/agent -fsanitize=fuzzer,address,undefined \
		-o $@ $(FUZZ_AGENT_SRCS) -lcjson -lm

# The extender's inputs: request bodies and watched objects. Run from the
# repository root (new inputs go to the first folder, outside the tree's seeds):
#   mkdir -p build/fuzz-extender && build/fuzz_extender -max_total_time=60 build/fuzz-extender test/fuzz/corpus-extender
$(BUILD)/fuzz_extender: test/fuzz/fuzz_extender.c $(LIB_SRCS) $(HDRS)
	@command -v clang >/dev/null || apt-get install -y -qq clang libclang-rt-14-dev >/dev/null
	clang -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -fsanitize=fuzzer,address,undefined \
		-o $@ test/fuzz/fuzz_extender.c $(filter-out src/agent/% src/devplugin/% src/proto/%,$(LIB_SRCS)) $(LIBS)

# The kubelet APIs' protobuf-c code (committed) from the k8s.io/kubelet module's .proto files.
proto:
	@src/proto/gen.sh

clean:
	rm -rf $(BUILD)

# A one-machine cluster to try it out: the e2e control plane, this machine as
# a real kubelet node with 8 fake GPUs (FAKE_NODES=N adds fake nodes), and
# deploy/ as gpu-extender:dev (test/node/local-cluster.sh; needs root). Runs in
# the background; the last line is the `export KUBECONFIG=...` to use.
FAKE_NODES ?= 0
.PHONY: cluster cluster-down
cluster: all | $(TEST_DEPS_STAMP)
	@FAKE_NODES=$(FAKE_NODES) test/node/local-cluster.sh up

cluster-down:
	@test/node/local-cluster.sh down
