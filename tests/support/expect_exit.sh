#!/usr/bin/env bash
# expect_exit.sh ok|fail COMMAND [ARGS...]: runs COMMAND with its output passed through, then prints one verdict
# line on how it ended. ctest ignores a test's exit status once PASS_REGULAR_EXPRESSION is set, so a test that checks
# text runs through this (strata_output_test in tests/CMakeLists.txt): its FAIL_REGULAR_EXPRESSION matches
# "expect_exit: FAIL", which this prints when
#   ok:   COMMAND exited non-zero;
#   fail: COMMAND exited 0 (a failure was expected), or was ended by a signal (status 128 and above: a crash, or
#         mpirun reporting a rank killed by one), which is never how a refusal ends.
set -u
if [ $# -lt 2 ] || { [ "$1" != ok ] && [ "$1" != fail ]; }; then
  echo "expect_exit: FAIL: usage: expect_exit.sh ok|fail COMMAND [ARGS...]"
  exit 2
fi
expect=$1
shift
"$@"
rc=$?
if [ "$expect" = ok ] && [ "$rc" -ne 0 ]; then
  echo "expect_exit: FAIL: exit status $rc where 0 was expected: $*"
  exit 1
elif [ "$expect" = fail ] && [ "$rc" -eq 0 ]; then
  echo "expect_exit: FAIL: exit status 0 where a failure was expected: $*"
  exit 1
elif [ "$expect" = fail ] && [ "$rc" -ge 128 ]; then
  echo "expect_exit: FAIL: exit status $rc (ended by signal $((rc - 128))) where a clean failure was expected: $*"
  exit 1
fi
echo "expect_exit: ok (exit status $rc, as expected)"
exit 0
