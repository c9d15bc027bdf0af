#!/bin/sh
# test/fuzz/tsan.sh BINARY...: runs the unit tests built with ThreadSanitizer
# (make tsan). A data race, a lock-order inversion or any other report fails
# the binary (halt_on_error; exit status 66), as does a failed test.
# Ends with "tsan: N passed, N failed", counting tests as test/unit/run.sh does.
# second_deadlock_stack: a lock-order report shows where both locks were taken.
TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1 $TSAN_OPTIONS"
export TSAN_OPTIONS
passed=0
failed=0
for t in "$@"; do
	out=$("$t" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
		f=1
		echo "$t exited with status $rc$( [ "$rc" -eq 66 ] && echo ' (ThreadSanitizer report)')"
	fi
	passed=$((passed + p))
	failed=$((failed + f))
done
echo "tsan: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
