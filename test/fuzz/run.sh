#!/bin/sh
# test/fuzz/run.sh SECONDS TARGET...: runs the libFuzzer targets (make fuzz-ci,
# make fuzz; docs/testing.md). For each target build/fuzz/fuzz_<t>:
#   1. every committed input of test/fuzz/corpus-<t> once (the regression cases);
#   2. SECONDS of fuzzing from those and the inputs earlier runs found, which
#      live in build/fuzz/corpus/<t>: the committed corpus is never written.
# A crash, leak, timeout or sanitizer report fails the target; its input is
# saved as build/fuzz/crash/<t>-crash-<sha1> (see docs/testing.md to keep it).
# Prints one line per target and ends with "fuzz: N passed, N failed".
secs=$1
shift
cd "$(dirname "$0")/../.." || exit 1   # the targets read config/ relative to the root
mkdir -p build/fuzz/crash build/fuzz/log
# -timeout is per input: generous, the machine may be busy with other builds.
opts="-timeout=30 -rss_limit_mb=2048 -print_final_stats=1"
passed=0
failed=0
for t in "$@"; do
	bin=build/fuzz/fuzz_$t
	seeds=test/fuzz/corpus-$t
	new=build/fuzz/corpus/$t
	log=build/fuzz/log/$t.log
	mkdir -p "$new"
	nseeds=$(find "$seeds" -type f | wc -l)
	before=$(find "$new" -type f | wc -l)
	start=$(date +%s)
	# shellcheck disable=SC2086
	if ! find "$seeds" -type f -print0 | xargs -0 "$bin" $opts >"$log" 2>&1; then
		why="a committed input fails"
	elif ! "$bin" $opts -max_total_time="$secs" -artifact_prefix="build/fuzz/crash/$t-" \
		"$new" "$seeds" >>"$log" 2>&1; then
		why="fuzzing found a failing input"
	else
		why=
	fi
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	found=$(( $(find "$new" -type f | wc -l) - before ))
	took=$(( $(date +%s) - start ))
	if [ -z "$why" ]; then
		passed=$((passed + 1))
		echo "ok - fuzz_$t: $nseeds seeds, ${execs:-0} runs in ${took}s (${rate:-0} exec/s), $found new inputs"
	else
		failed=$((failed + 1))
		echo "FAIL - fuzz_$t: $why (log: $log)"
		grep -E '^(==[0-9]+==|SUMMARY|Running:|artifact_prefix|Test unit written|.*runtime error)' "$log" | tail -20
	fi
done
echo "fuzz: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
