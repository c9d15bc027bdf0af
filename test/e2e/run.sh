#!/usr/bin/env bash
# Runs every end-to-end suite (each starts its own real control plane on
# loopback and tears it down) and ends with one summary line.
#   test/e2e/run.sh [SUITE...]     default: every test/e2e/*.sh but lib.sh and run.sh
set -u
cd "$(dirname "$0")/../.."
# Build the control-plane binaries once, up front (cached after the first time).
test/cluster/build.sh >/dev/null || { echo "e2e: 0 passed, 1 failed (building the control plane)"; exit 1; }
suites=("$@")
if ((${#suites[@]} == 0)); then
  for f in test/e2e/*.sh; do
    case $(basename "$f") in lib.sh|run.sh) ;; *) suites+=("$f") ;; esac
  done
fi
# Nothing the suites start may outlive them (zombies aside: they hold no
# resources). Processes that were already running are not ours.
leftovers() {
  ps -eo pid=,stat=,comm= | awk '$2 !~ /^Z/ && $3 ~ /^(kube-apiserver|kube-scheduler|kube-controller|etcd|gpu-extender|gpu-agent)$/ {print $1, $3}'
}
before=$(leftovers)
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
left=$(comm -13 <(sort <<<"$before") <(leftovers | sort) | grep .)
if [[ -n $left ]]; then
  echo "e2e: processes left behind:"; echo "$left"
  failed=$((failed + 1))
fi
echo "e2e: $passed passed, $failed failed"
((failed == 0))
