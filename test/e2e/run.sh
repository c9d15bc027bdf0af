#!/usr/bin/env bash
# Runs every end-to-end suite (each starts its own real control plane on
# loopback and tears it down) and ends with one summary line.
#   test/e2e/run.sh [SUITE...]     default: every test/e2e/*.sh but lib.sh and run.sh
set -u
cd "$(dirname "$0")/../.."
# Build the control-plane binaries once, up front (cached after the first time).
test/cluster/build.sh || { echo "e2e: 0 passed, 1 failed (building the control plane)"; exit 1; }
suites=("$@")
if ((${#suites[@]} == 0)); then
  for f in test/e2e/*.sh; do
    case $(basename "$f") in lib.sh|run.sh) ;; *) suites+=("$f") ;; esac
  done
fi
# Every cluster of this run lives under a private TMPDIR, and every process a
# suite starts names its cluster's directory on its command line: after the
# run, none of them may be left (zombies aside: they hold nothing). The real
# node's containers do not (their shims do): a process in a kubepods cgroup
# is left over too, unless a node outside this run (`make cluster`) owns them.
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpu-e2e.XXXXXX")
export TMPDIR=$run_tmp
leftovers() {
  local pid pods=1 owner
  owner=$(cat /run/gpu-extender-test-node/owner 2>/dev/null) && [[ $owner != "$run_tmp"/* ]] && pods=0
  for pid in $(ps -eo pid=,stat= | awk '$2 !~ /^Z/ {print $1}'); do
    local cmd
    cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || continue   # gone meanwhile
    if [[ $cmd == *"$run_tmp"* ]] || { ((pods)) && grep -q ':/kubepods' "/proc/$pid/cgroup" 2>/dev/null; }; then
      echo "$pid ${cmd:0:100}"
    fi
  done
}
passed=0 failed=0
for s in "${suites[@]}"; do
  start=$(date +%s)
  out=$(bash "$s" 2>&1); rc=$?
  printf '%s\n' "$out"
  line=$(grep -E '[0-9]+ passed, [0-9]+ failed' <<<"$out" | tail -1)
  p=$(sed -E 's/.* ([0-9]+) passed.*/\1/' <<<"$line"); f=$(sed -E 's/.* ([0-9]+) failed.*/\1/' <<<"$line")
  [[ $p =~ ^[0-9]+$ ]] || p=0
  [[ $f =~ ^[0-9]+$ ]] || f=0
  ((rc != 0 && f == 0)) && f=1
  passed=$((passed + p)) failed=$((failed + f))
  echo "--- $(basename "$s"): ${p} passed, ${f} failed in $(($(date +%s) - start))s"
done
left=$(leftovers)
if [[ -n $left ]]; then
  echo "e2e: processes left behind:"; echo "$left"
  failed=$((failed + 1))
fi
rm -rf "$run_tmp"
echo "e2e: $passed passed, $failed failed"
((failed == 0))
