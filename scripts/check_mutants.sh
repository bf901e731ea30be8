#!/usr/bin/env bash
# Proves that the tests bite: plants each deliberate bug of tests/mutants/ (a patch each) in a scratch copy of this
# tree, builds what its test needs and runs the test, which must fail; the same test on the unpatched copy must pass.
# Prints one row per mutant and exits non-zero when a test passed on its mutant or failed on the real code.
# Usage: scripts/check_mutants.sh [NAME...]          every mutant, or the named ones (tests/mutants/NAME.patch)
#        scripts/check_mutants.sh --tests-from COMMIT [NAME...]
#            the same bugs against COMMIT's tests/ (each mutant's `old:` command): shows what the older suite let
#            through; there a mutant that passes is the finding, and the exit status is 0.
# A mutant file: comment lines, then the patch (git diff format, paths from the repository root, applied by patch -p1):
#   # what: the bug it plants, in a line
#   # target: the CMake targets its test needs ("all" for the install test)
#   # run: the command that must fail on the mutant, run in the build directory ($MPIEXEC is the launcher)
#   # old: the older suite's nearest command, for --tests-from
# Work happens in build-mutants/ (STRATA_MUTANTS_DIR): a copy of the tree (tracked and untracked files, so
# uncommitted work is included) and a CPU-only Release build, reused between runs. About 1-3 minutes a mutant after
# the first build. Not part of CI.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tests_from=""
if [ "${1:-}" = --tests-from ]; then
  [ $# -ge 2 ] || { echo "check_mutants: --tests-from needs a commit" >&2; exit 2; }
  tests_from=$(git rev-parse --verify "$2^{commit}") || { echo "check_mutants: no commit '$2'" >&2; exit 2; }
  shift 2
fi
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in tests/mutants/*.patch; do names+=("$(basename "$f" .patch)"); done
fi
for n in "${names[@]}"; do
  [ -f "tests/mutants/$n.patch" ] || { echo "check_mutants: no tests/mutants/$n.patch" >&2; exit 2; }
done

work=${STRATA_MUTANTS_DIR:-$root/build-mutants}
tree=$work/tree
build=$work/build
mkdir -p "$work"
# The copy is synced by content: a file whose bytes changed since the last run is rewritten (so its time is new and
# the build redoes it), the others keep theirs and stay built. Times alone would mislead: an older commit's tests/
# (--tests-from) carries that commit's times, older than the objects built from today's.
staging=$work/staging
rm -rf "$staging" && mkdir -p "$staging" "$tree"
git ls-files -co --exclude-standard -z | tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -x -C "$staging"
if [ -n "$tests_from" ]; then
  echo "check_mutants: tests/ from ${tests_from:0:12}"
  rm -rf "$staging/tests" && git archive "$tests_from" tests | tar -x -C "$staging"
fi
echo "check_mutants: syncing the copy in $tree"
(cd "$staging" && find . -type f -print0) | while IFS= read -r -d '' f; do
  cmp -s "$staging/$f" "$tree/$f" || { mkdir -p "$(dirname "$tree/$f")" && cp "$staging/$f" "$tree/$f"; }
done
(cd "$tree" && find . -type f -print0) | while IFS= read -r -d '' f; do
  [ -e "$staging/$f" ] || rm -f "$tree/$f"
done
cmake -S "$tree" -B "$build" -DCMAKE_BUILD_TYPE=Release -DSTRATA_CUDA=OFF >"$work/configure.log" 2>&1 ||
  { echo "check_mutants: configure failed: $work/configure.log" >&2; exit 2; }

export MPIEXEC="mpiexec --allow-run-as-root --oversubscribe --bind-to none"
export STRATA_VALIDATE=1 STRATA_LOG_LEVEL=warn STRATA_TIMEOUT_S=60 OMPI_MCA_rmaps_base_oversubscribe=1
field() { sed -n "s/^# $1: //p" "$2" | head -1; }
# run_case LOG TARGETS COMMAND: builds the targets, runs the command in the build directory; prints pass, fail,
# build-failed or timeout.
run_case() {
  local log=$1 targets=$2 command=$3
  if ! cmake --build "$build" -j"$(nproc)" --target $targets >"$log" 2>&1; then
    echo build-failed
    return
  fi
  (cd "$build" && timeout 900 bash -c "$command") >>"$log" 2>&1
  case $? in
    0) echo pass ;;
    124) echo timeout ;;
    *) echo fail ;;
  esac
}

rows=()
bad=0
for n in "${names[@]}"; do
  patch=$root/tests/mutants/$n.patch
  what=$(field what "$patch")
  targets=$(field target "$patch")
  command=$(field run "$patch")
  [ -n "$tests_from" ] && command=$(field old "$patch")
  if [ -z "$targets" ] || [ -z "$command" ]; then
    echo "check_mutants: $n.patch lacks its target or run (old) line" >&2
    exit 2
  fi
  echo "check_mutants: $n: $what"
  real=$(run_case "$work/$n.real.log" "$targets" "$command")
  if ! patch -d "$tree" -p1 --dry-run -s <"$patch" >"$work/$n.apply.log" 2>&1; then
    rows+=("$(printf '%-32s %-10s %-10s %s' "$n" "$real" "no-apply" "the patch no longer applies: $work/$n.apply.log")")
    bad=1
    continue
  fi
  patch -d "$tree" -p1 -s <"$patch"
  mutant=$(run_case "$work/$n.mutant.log" "$targets" "$command")
  patch -d "$tree" -p1 -R -s <"$patch"
  verdict="ok"
  if [ -n "$tests_from" ]; then
    [ "$mutant" = pass ] && verdict="the older suite let it through" || verdict="the older suite caught it"
  elif [ "$real" != pass ] || [ "$mutant" != fail ]; then
    verdict="WRONG: the test must pass on the real code and fail on the mutant (logs: $work/$n.*.log)"
    bad=1
  fi
  rows+=("$(printf '%-32s %-10s %-10s %s' "$n" "$real" "$mutant" "$verdict")")
done
# The last mutant's files are back as they were; the next run rebuilds them.
echo "==== check_mutants${tests_from:+ (tests from ${tests_from:0:12})}"
printf '%-32s %-10s %-10s %s\n' mutant "real code" mutant verdict
printf '%s\n' "${rows[@]}"
[ -n "$tests_from" ] && exit 0
exit $bad
