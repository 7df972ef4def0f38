#!/bin/sh
# tests/comm_failure.sh MPIEXEC TEST_COMM MODE PATTERN...: runs test_comm's
# failure MODE on two ranks and passes when the job ends by itself (not by
# this script's 50 s limit), with a non-zero status and every PATTERN
# (extended regular expressions) in its output.
out=$(timeout 50 "$1" --allow-run-as-root --oversubscribe -np 2 "$2" "--$3" 2>&1)
rc=$?
printf '%s\n' "$out"
echo "comm_failure: the job exited with status $rc"
[ "$rc" -ne 0 ] || { echo "comm_failure: the job should have failed"; exit 1; }
[ "$rc" -ne 124 ] || { echo "comm_failure: the job hung until killed"; exit 1; }
shift 3
for pattern in "$@"; do
  printf '%s\n' "$out" | grep -q -E "$pattern" ||
    { echo "comm_failure: no message matching '$pattern'"; exit 1; }
done
