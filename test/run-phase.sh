#!/bin/sh
# test/run-phase.sh NAME CMD...: runs one test phase and prints its duration.
name=$1; shift
start=$(date +%s)
echo "=== $name: start"
"$@"; rc=$?
echo "=== $name: $( [ $rc -eq 0 ] && echo passed || echo FAILED ) in $(( $(date +%s) - start ))s"
exit $rc
