#!/bin/sh
# test/blackbox/asan.sh EXTENDER AGENT [--sim]: the black-box suites again,
# on gpu-extender and gpu-agent built with AddressSanitizer + UBSan
# (build/asan/; `make blackbox` runs this after the normal pass).
#
# A sanitizer report fails the run even where no test notices it (a server
# that died after its last request, a leak at exit, an error path whose exit
# status a test expects anyway): reports go to files under one directory,
# which must stay empty. The agent suite runs its binary with `env -i`, so
# the agent is started through a wrapper that puts the options back.
# --sim also runs the simulator check (slower; the normal pass runs it).
# Ends with "asan: N passed, N failed" (suites).
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
abs() { case $1 in /*) echo "$1" ;; *) echo "$ROOT/$1" ;; esac; }
EXT=$(abs "${1:-build/asan/gpu-extender}")
AGENT=$(abs "${2:-build/asan/gpu-agent}")
LOGS=$ROOT/build/asan/reports
rm -rf "$LOGS"
mkdir -p "$LOGS"
TMP=$(mktemp -d /tmp/asan-blackbox.XXXXXX)
trap 'rm -rf "$TMP"' EXIT INT TERM

# halt_on_error: the first report ends the process (exit 1 as well as the report file).
ASAN_OPTIONS="halt_on_error=1:detect_leaks=1:detect_stack_use_after_return=1:strict_string_checks=1:log_path=$LOGS/asan"
UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$LOGS/ubsan"
export ASAN_OPTIONS UBSAN_OPTIONS
cat > "$TMP/gpu-agent" <<EOF
#!/bin/sh
ASAN_OPTIONS='$ASAN_OPTIONS' UBSAN_OPTIONS='$UBSAN_OPTIONS' exec '$AGENT' "\$@"
EOF
chmod +x "$TMP/gpu-agent"

passed=0
failed=0
suite() {
	name=$1
	shift
	start=$(date +%s)
	if "$@"; then r=ok; passed=$((passed + 1)); else r=FAILED; failed=$((failed + 1)); fi
	echo "asan: $name suite $r in $(( $(date +%s) - start ))s"
}
suite extender python3 "$ROOT/test/blackbox/run.py" "$EXT"
suite agent "$ROOT/test/agent/run.sh" "$TMP/gpu-agent"
[ "$3" = --sim ] && suite simulator python3 "$ROOT/test/sim/check_expected.py" "$EXT"

reports=$(find "$LOGS" -type f | wc -l)
if [ "$reports" -gt 0 ]; then
	failed=$((failed + 1))
	echo "asan: $reports sanitizer report(s) in $LOGS:"
	for f in "$LOGS"/*; do
		echo "--- $f"
		head -40 "$f"
	done
fi
echo "asan: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
