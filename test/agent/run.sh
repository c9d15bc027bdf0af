#!/bin/sh
# Black-box tests of build/gpu-agent: fake vendor tools (shell scripts that
# print the recorded outputs in test/fixtures/agent) are the only programs on
# PATH; the agent runs `detect --node n1` and python3 checks the JSON.
#
#   test/agent/run.sh [path/to/gpu-agent]
#
# Ends with "N passed, N failed"; exits 1 when anything failed.

AGENT=${1:-build/gpu-agent}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FIX=$ROOT/test/fixtures/agent
PY=$(command -v python3)
case $AGENT in /*) ;; *) AGENT=$ROOT/$AGENT ;; esac
if [ ! -x "$AGENT" ]; then
	echo "no agent binary at $AGENT (make build/gpu-agent)" >&2
	exit 1
fi
if [ -z "$PY" ]; then
	echo "python3 is needed to check the JSON" >&2
	exit 1
fi

TMP=$(mktemp -d /tmp/agent-blackbox.XXXXXX)
trap 'rm -rf "$TMP"' EXIT INT TERM
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok - $1"; }
bad() { failed=$((failed + 1)); echo "FAIL - $1: $2"; }

# A fresh directory of fake tools for a scenario.
scenario() {
	BIN=$TMP/$1
	rm -rf "$BIN"
	mkdir -p "$BIN"
}

# tool NAME BODY: a fake tool; BODY may use $FIX and only absolute commands.
tool() {
	printf '#!/bin/sh\n%s\n' "$2" > "$BIN/$1"
	chmod +x "$BIN/$1"
}

# nvidia QUERY LIST TOPO SMI: an nvidia-smi answering the detector's calls ("-" = fails).
nvidia() {
	c() { if [ "$1" = - ]; then echo "exit 1"; else echo "exec /bin/cat '$FIX/$1'"; fi; }
	tool nvidia-smi "case \"\$1\" in
--query-gpu=*) $(c "$1") ;;
-L) $(c "$2") ;;
topo) $(c "$3") ;;
'') $(c "$4") ;;
*) exit 2 ;;
esac"
}

# run_agent [env assignments...] -- args: runs the agent with only $BIN on PATH.
run_agent() {
	envs=""
	while [ "$1" != -- ]; do envs="$envs $1"; shift; done
	shift
	start=$(date +%s)
	# shellcheck disable=SC2086
	env -i PATH="$BIN" $envs "$AGENT" "$@" > "$TMP/out" 2> "$TMP/err"
	rc=$?
	elapsed=$(( $(date +%s) - start ))
}

# check NAME PYTHON-EXPRESSION...: each expression, with d = the JSON, must be true.
check() {
	name=$1
	shift
	msg=$("$PY" - "$TMP/out" "$@" <<'EOF'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print("output is not JSON: %s" % e)
    sys.exit(1)
devs = d.get("status", {}).get("devices", [])
for expr in sys.argv[2:]:
    try:
        ok = eval(expr, {"d": d, "devs": devs, "s": d.get("status", {})})
    except Exception as e:
        print("%s raised %r" % (expr, e))
        sys.exit(1)
    if not ok:
        print("not true: %s" % expr)
        sys.exit(1)
EOF
)
	if [ $? -eq 0 ]; then ok "$name"; else bad "$name" "$msg"; fi
}

expect_rc() {
	if [ "$rc" -eq "$2" ]; then ok "$1"; else bad "$1" "exit status $rc, want $2 (stderr: $(head -c 300 "$TMP/err"))"; fi
}

expect_err() {
	if grep -q -- "$2" "$TMP/err"; then ok "$1"; else bad "$1" "stderr lacks '$2': $(head -c 300 "$TMP/err")"; fi
}

err_lines() {
	n=$(grep -c "$2" "$TMP/err")
	if [ "$n" -eq "$3" ]; then ok "$1"; else bad "$1" "$n lines matching '$2', want $3"; fi
}

# ---- an 8-GPU NVLink node (two recordings of 8x A100-SXM4-80GB hosts) ----
scenario nvlink8
nvidia nvidia/a100-sxm4-80gb-8gpu.query.csv nvidia/a100-sxm4-80gb-8gpu.list.txt nvidia/a100-sxm4-80gb-8gpu.topo.txt -
run_agent -- detect --node n1
expect_rc "nvlink8: exit status" 0
check "nvlink8: GpuNodeStatus for n1" \
	'd["apiVersion"] == "gpu.scheduling/v1" and d["kind"] == "GpuNodeStatus"' \
	'd["metadata"]["name"] == "n1" and d["spec"]["nodeName"] == "n1"' \
	's["total"] == 8 and len(devs) == 8'
check "nvlink8: devices" \
	'[x["id"] for x in devs] == list(range(8))' \
	'all(x["vendor"] == "nvidia" and x["architecture"] == "ampere" for x in devs)' \
	'all(x["model"] == "NVIDIA A100-SXM4-80GB" and x["memoryMiB"] == 81920 for x in devs)' \
	'all(x["health"] == "Healthy" and x["inUseBy"] == [] for x in devs)' \
	'devs[7]["uuid"] == "GPU-2545335d-3baa-188c-36b5-f645e39e1923"'
check "nvlink8: one island at 600 GB/s" \
	'all(x["island"] == "nvlink-0" and x["bandwidthGBps"] == 600 for x in devs)' \
	'len(s["islands"]) == 1 and s["islands"][0]["devices"] == list(range(8))' \
	'len(s["links"]) == 28 and s["links"][0]["code"] == "NV12"'
check "nvlink8: vendor states" \
	's["vendors"]["nvidia"]["state"] == "ok"' \
	's["vendors"]["amd"]["state"] == "absent" and s["vendors"]["intel"]["state"] == "absent"' \
	'"lastUpdated" in s and s["agentVersion"]'

# ---- a PCIe-only NVIDIA workstation: topo -m not available ----
scenario pcie
nvidia nvidia/rtx-a5000-rtx4500ada-workstation.query.csv - - -
run_agent -- detect --node n1
expect_rc "pcie: exit status" 0
check "pcie: two models, no islands" \
	'[x["model"] for x in devs] == ["NVIDIA RTX A5000", "NVIDIA RTX 4500 Ada Generation"]' \
	'[x["architecture"] for x in devs] == ["ampere", "ada"]' \
	'all("island" not in x and x["bandwidthGBps"] == 0 for x in devs)' \
	'devs[1]["driverVersion"] == "610.57.04"' \
	'"topo" in s["vendors"]["nvidia"]["message"]'

# ---- a PCIe-only AMD box (rocminfo + rocm-smi --showtopo) ----
scenario amdpcie
tool rocminfo "exec /bin/cat '$FIX/amd/mi210-4gpu.rocminfo.txt'"
tool rocm-smi "case \"\$*\" in *showtopo*) exec /bin/cat '$FIX/amd/pcie-4gpu.showtopo.txt' ;; *) echo '{}' ;; esac"
run_agent -- detect --node n1
expect_rc "amd pcie: exit status" 0
check "amd pcie: MI210 x4" \
	's["total"] == 4 and [x["id"] for x in devs] == [0, 1, 2, 3]' \
	'all(x["vendor"] == "amd" and x["architecture"] == "gfx90a" for x in devs)' \
	'all(x["model"] == "AMD Instinct MI210" and x["memoryMiB"] == 65520 for x in devs)' \
	'all(x["driverVersion"] == "6.10.5" and "island" not in x for x in devs)' \
	'devs[0]["uuid"] == "GPU-29273e62ca00396c" and devs[0]["pciBusId"] == "0000:e3:00.0"'

# ---- an 8-GPU XGMI node seen by rocm-smi only ----
scenario xgmi8
tool rocm-smi "case \"\$*\" in *showtopo*) exec /bin/cat '$FIX/amd/mi308x-8gpu.showtopo.txt' ;; *) exec /bin/cat '$FIX/amd/mi308x-8gpu.meminfo.txt' ;; esac"
run_agent -- detect --node n1
expect_rc "xgmi8: exit status" 0
check "xgmi8: one XGMI island, health unknown without rocminfo" \
	's["total"] == 8' \
	'all(x["island"] == "xgmi-0" and x["memoryMiB"] == 196592 for x in devs)' \
	'all(x["health"] == "Unknown" for x in devs)'

# ---- MIG ----
scenario mig
nvidia nvidia/h100-mig.query-full.csv nvidia/h100-mig.list.txt nvidia/h100-mig.topo.txt nvidia/h100-mig.smi.txt
run_agent -- detect --node n1
expect_rc "mig: exit status" 0
check "mig: the GPU as its four instances" \
	's["total"] == 4' \
	'[x["id"] for x in devs] == [1000, 1001, 1002, 1003]' \
	'[x["migProfile"] for x in devs] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]' \
	'[x["memoryMiB"] for x in devs] == [40448, 20096, 9984, 9984]' \
	'all(x["parentId"] == 0 and x["index"] == 0 and x["architecture"] == "hopper" for x in devs)' \
	'devs[2]["uuid"] == "MIG-00000002-0000-0000-0000-000000000002"'

# ---- three vendors on one node ----
scenario mixed
nvidia nvidia/h100-80gb-1gpu.query-full.csv nvidia/h100-80gb-1gpu.list.txt nvidia/h100-80gb-1gpu.topo.txt -
tool rocminfo "exec /bin/cat '$FIX/amd/mi300x-vf-1gpu.rocminfo.txt'"
tool clinfo "exec /bin/cat '$FIX/intel/flex140-openshift.clinfo-truncated.txt'"
run_agent -- detect --node n1
expect_rc "mixed: exit status" 0
check "mixed: ids stay unique across vendors" \
	'[(x["id"], x["vendor"], x["index"]) for x in devs] == [(0, "nvidia", 0), (100, "amd", 0), (200, "intel", 0)]' \
	'[x["architecture"] for x in devs] == ["hopper", "gfx942", "xe-hpg"]' \
	'devs[0]["computeCapability"] == "9.0" and devs[0]["driverVersion"] == "590.48.01"' \
	'devs[1]["memoryMiB"] == 196288 and devs[1]["driverVersion"] == "6.16.13"' \
	'devs[2]["health"] == "Unknown" and devs[2]["healthReason"] == "memory size not reported"'
run_agent -- labels --node n1
if grep -q '^gpu.scheduling/vendor=mixed$' "$TMP/out" && grep -q '^gpu.scheduling/count=3$' "$TMP/out"; then
	ok "mixed: labels"
else
	bad "mixed: labels" "$(cat "$TMP/out")"
fi

# ---- garbage: one clear log line, status kept out, no crash ----
scenario garbage
tool nvidia-smi "exec /bin/cat '$FIX/broken/garbage-binary.bin'"
tool rocminfo "exec /bin/cat '$FIX/amd/mi250x-1gcd.rocminfo.txt'"
run_agent -- detect --node n1
expect_rc "garbage: exit status 3" 3
check "garbage: nvidia failed, amd still there" \
	's["vendors"]["nvidia"]["state"] == "failed"' \
	'"not text" in s["vendors"]["nvidia"]["message"]' \
	's["total"] == 1 and devs[0]["vendor"] == "amd" and devs[0]["id"] == 0'
err_lines "garbage: one log line" "gpu detection failed" 1

# ---- truncated output ----
scenario truncated
nvidia broken/a100-8gpu.query-truncated.csv nvidia/a100-sxm4-80gb-8gpu.list.txt - -
run_agent -- detect --node n1
expect_rc "truncated: exit status 3" 3
check "truncated: reported as cut short" \
	's["vendors"]["nvidia"]["state"] == "failed" and "cut short" in s["vendors"]["nvidia"]["message"]' \
	's["total"] == 0'
expect_err "truncated: log line" 'vendor=nvidia'

# ---- a tool that hangs: the timeout fires ----
scenario hang
tool nvidia-smi "exec /bin/sleep 60"
run_agent -- detect --node n1 --timeout 1
expect_rc "hang: exit status 3" 3
if [ "$elapsed" -le 5 ]; then ok "hang: returns promptly"; else bad "hang: returns promptly" "${elapsed}s"; fi
check "hang: timed out" '"timed out" in s["vendors"]["nvidia"]["message"]'
err_lines "hang: one log line" "gpu detection failed" 1

# ---- a tool that exits non-zero ----
scenario nonzero
tool nvidia-smi "/bin/cat '$FIX/broken/nvidia-smi-no-driver.txt'; exit 9"
run_agent -- detect --node n1
expect_rc "nonzero: exit status 3" 3
check "nonzero: the tool's own words" \
	'"exited with status 9" in s["vendors"]["nvidia"]["message"]' \
	'"couldn'"'"'t communicate with the NVIDIA driver" in s["vendors"]["nvidia"]["message"]'

# ---- no vendor tools at all ----
scenario none
run_agent -- detect --node n1
expect_rc "none: exit status" 0
check "none: no GPUs, all absent" 's["total"] == 0 and devs == []' \
	'all(v["state"] == "absent" for v in s["vendors"].values())'

# ---- node name: --node, NODE_NAME, host name ----
run_agent NODE_NAME=from-env -- detect --compact
check "node name from NODE_NAME" 'd["metadata"]["name"] == "from-env"'
run_agent NODE_NAME=from-env -- detect --node from-flag --no-timestamp
check "--node wins over NODE_NAME" 'd["metadata"]["name"] == "from-flag"' '"lastUpdated" not in s'
run_agent -- detect
check "node name from the host name" 'd["metadata"]["name"] != ""'

# ---- the command line ----
run_agent -- run --node n1
expect_rc "run: no cluster configuration" 1
expect_err "run: says so" "not running in a cluster"
run_agent -- --help
expect_rc "--help" 0
run_agent -- --bogus detect
expect_rc "unknown option" 2
run_agent -- --timeout nope detect
expect_rc "bad --timeout" 2
run_agent -- detect --node n1 --tools-dir "$TMP/no-such-dir"
expect_rc "--tools-dir that does not exist" 2
expect_err "--tools-dir that does not exist: names it" "no-such-dir"
run_agent -- detect --node n1 --compact false --no-timestamp true
expect_rc "--compact false: a boolean takes a separate false" 0
check "--compact false: pretty-printed" 'True'
if [ "$(wc -l < "$TMP/out")" -gt 1 ]; then ok "--compact false: on many lines"; else bad "--compact false: on many lines" "$(head -c 200 "$TMP/out")"; fi
run_agent -- --interval 0 run --node n1
expect_rc "--interval 0 refused" 2
expect_err "--interval 0: says the range" "1..86400"

# ---- the device plugin's options and kubelet's record ----
run_agent -- run --device-plugin --delivery envvar --node n1
expect_rc "bad --delivery" 2
expect_err "bad --delivery: names the modes" "devices, volume-mounts or cdi"
run_agent -- run --device-plugin --share-slots 0 --node n1
expect_rc "bad --share-slots" 2
run_agent -- run --device-plugin --device-root relative/dir --node n1
expect_rc "relative --device-root" 2
expect_err "relative --device-root: says why" "absolute path"
run_agent -- podresources --podresources-socket "$TMP/no-kubelet.sock"
expect_rc "podresources without kubelet" 1
expect_err "podresources without kubelet: names the socket" "no-kubelet.sock"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
