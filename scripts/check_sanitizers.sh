#!/usr/bin/env bash
# Runs the checkpoint and safetensors tests under ASan + UBSan, then fuzzes the four parsers of untrusted files with
# libFuzzer; prints a verdict line per part and exits non-zero when any part fails.
# Usage: scripts/check_sanitizers.sh   (after scripts/setup.sh, as .ci/run does: it installs the build's packages)
#   STRATA_FUZZ_SECONDS=60   how long each fuzzer runs (they run side by side)
#
#   build-asan  g++, STRATA_SANITIZE=ON: test_gpt, test_kernels, test_ring_attention (ring attention's strided blocks),
#               test_tensor (the tp pieces over bf16 activations: the sequence gather's permutations),
#               test_gpt_decode (the KV cache's views, host staging), test_gpt_decode_shard and test_inference
#               (weight and cache streams beside the shard group's gathers) and test_checkpoint, run by ctest through
#               mpiexec (np 1 to 4)
#   build-fuzz  clang++, STRATA_SANITIZE=ON, STRATA_FUZZ=ON: fuzz_safetensors, fuzz_checkpoint_index and
#               fuzz_cluster_file (the simulator's cluster files), fuzz_step_declaration (strata-plan --declaration's
#               input), each run on a copy of its seed corpus
#               (tests/fuzz/corpus/<parser>/)
# The tests build with the project's usual compiler: Clang 14, the only one libFuzzer comes with here, cannot compile
# models/gpt (structured bindings inside OpenMP loops need Clang 16), and the fuzzers do not need the GPT library.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
fuzz_seconds=${STRATA_FUZZ_SECONDS:-60}
jobs=$(nproc)

# clang (Clang 14) and libclang-rt-14-dev (its ASan/UBSan runtimes and libFuzzer: libclang_rt.fuzzer-x86_64.a; only
# a recommendation of clang, so named here), libomp-14-dev (Clang's OpenMP, which models/gpt's configure looks for),
# llvm-14 (llvm-symbolizer: file:line in Clang's sanitizer reports).
packages=(clang libclang-rt-14-dev libomp-14-dev llvm-14)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "check_sanitizers: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
for tool in cmake mpiexec g++ clang++; do
  command -v "$tool" >/dev/null || { echo "check_sanitizers: $tool not found (run scripts/setup.sh first)"; exit 2; }
done
# Each build directory keeps its compiler: one configured with another (or another path to it) is started afresh, as
# CMake would reset its cache and drop the options given here.
gxx=$(command -v g++)
clangxx=$(command -v clang++)
keep_compiler() {  # keep_compiler DIR COMPILER
  local recorded=("$1"/CMakeFiles/*/CMakeCXXCompiler.cmake)
  if [ -f "${recorded[0]}" ] && ! grep -qs "set(CMAKE_CXX_COMPILER \"$2\")" "${recorded[@]}"; then
    echo "check_sanitizers: $1 was configured with another compiler: starting it afresh"
    rm -rf "$1"
  fi
}
keep_compiler build-asan "$gxx"
keep_compiler build-fuzz "$clangxx"

# halt_on_error / abort_on_error: the first report fails the test or is the fuzzer's finding. Leaks that Open MPI
# and its libraries leave at exit are suppressed by tests/fuzz/lsan.supp (each one explained there); its patterns
# match only with full allocation stacks, hence fast_unwind_on_malloc=0 for the tests (Open MPI has no frame
# pointers). The fuzzers never initialise MPI and keep the fast unwinder.
# intercept_tls_get_addr=0: the __tls_get_addr interceptor of GCC 12's (and up to LLVM 16's) runtime takes any dynamic
# TLS block that starts 16 bytes into a page for glibc 2.18's layout, and reads the two words before it as the block's
# bounds; where a block of an Open MPI component lands there by chance, the leak checker's tracer scans a range that is
# not mapped and dies ("Tracer caught signal 11", then "LeakSanitizer has encountered a fatal error") after every test
# passed: google/sanitizers#1322. Without the interceptor, LSan scans no dynamic TLS, which holds no pointer of
# Strata's: its threads use static TLS only, and every one is joined before exit.
asan_common="detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0"
asan_common+=":external_symbolizer_path=/usr/lib/llvm-14/bin/llvm-symbolizer"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export LSAN_OPTIONS="suppressions=$PWD/tests/fuzz/lsan.supp:print_suppressions=0"

verdicts=()
failed=0
verdict() {  # verdict PART PASS|FAIL DETAIL
  verdicts+=("$(printf '%-24s %-4s  %s' "$1" "$2" "$3")")
  [ "$2" = PASS ] || failed=1
}

# ---- The tests under ASan + UBSan -----------------------------------------------------------------------------
t0=$SECONDS
# -O1 -g1 (ASan's own advice: -O1; line tables are all a report's file:line needs): GCC compiles the instrumented
# libraries about a third faster than at RelWithDebInfo's -O2 -g, the half of CI that took longest.
if ! cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
       -DCMAKE_CXX_COMPILER="$gxx" -DSTRATA_CUDA=OFF -DSTRATA_SANITIZE=ON; then
  verdict "sanitized tests" FAIL "configure of build-asan failed"
else
  targets=(test_gpt test_ring_attention test_tensor test_kernels test_gpt_decode test_gpt_decode_shard test_inference
           test_checkpoint)
  regex='test_gpt|test_ring_attention|test_tensor|test_kernels|test_gpt_decode|test_gpt_decode_shard|test_inference|test_checkpoint'
  if ! cmake --build build-asan -j"$jobs" --target "${targets[@]}"; then
    verdict "sanitized tests" FAIL "build of ${targets[*]} failed"
  elif ASAN_OPTIONS="$asan_common:fast_unwind_on_malloc=0" \
       ctest --test-dir build-asan --output-on-failure --no-tests=error -j"$jobs" -R "^(${regex})(_np[0-9]+)?\$"; then
    verdict "sanitized tests" PASS "${targets[*]} under ASan + UBSan ($((SECONDS - t0)) s with the build)"
  else
    verdict "sanitized tests" FAIL "${targets[*]}: see the ctest output above"
  fi
fi

# ---- The fuzzers ------------------------------------------------------------------------------------------------
t0=$SECONDS
fuzzers=(fuzz_safetensors:safetensors fuzz_checkpoint_index:checkpoint_index fuzz_cluster_file:cluster_file
         fuzz_step_declaration:step_declaration)
if ! cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$clangxx" -DSTRATA_CUDA=OFF \
       -DSTRATA_SANITIZE=ON -DSTRATA_FUZZ=ON; then
  verdict "fuzzers" FAIL "configure of build-fuzz failed"
elif ! cmake --build build-fuzz -j"$jobs" --target fuzz_safetensors fuzz_checkpoint_index fuzz_cluster_file \
    fuzz_step_declaration; then
  verdict "fuzzers" FAIL "build of the fuzzers failed"
else
  echo "check_sanitizers: fuzzers built in $((SECONDS - t0)) s; running each for ${fuzz_seconds} s"
  pids=()
  for f in "${fuzzers[@]}"; do
    name=${f%%:*}
    work=build-fuzz/fuzz-work/$name
    rm -rf "$work" && mkdir -p "$work/corpus" "$work/artifacts"
    cp tests/fuzz/corpus/"${f##*:}"/* "$work/corpus/"
    # -timeout: an input that takes 10 s is a hang; -rss_limit_mb also caps a single allocation (malloc_limit_mb).
    ASAN_OPTIONS="$asan_common" build-fuzz/bin/"$name" -max_total_time="$fuzz_seconds" -rss_limit_mb=2048 \
      -timeout=10 -print_final_stats=1 -artifact_prefix="$work/artifacts/" "$work/corpus" >"$work/log" 2>&1 &
    pids+=($!)
  done
  for i in "${!fuzzers[@]}"; do
    name=${fuzzers[$i]%%:*}
    work=build-fuzz/fuzz-work/$name
    wait "${pids[$i]}"
    rc=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$work/log" | tail -1)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log")
    cov=$(sed -n 's/.* cov: \([0-9]*\) ft: \([0-9]*\) corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/cov \1, ft \2, corpus \3/p' \
          <<<"$done_line")
    artifacts=$(ls -A "$work/artifacts")
    if [ "$rc" -eq 0 ] && [ -z "$artifacts" ] && [ -n "$done_line" ]; then
      verdict "$name" PASS "${execs:-?} execs in ${fuzz_seconds} s, ${cov:-no stats}"
    else
      echo "---- $name: exit status $rc; the start of its report (the whole log: $work/log):"
      sed -n '/==ERROR: \|runtime error: \|ERROR: libFuzzer\|^ALARM: /,$p' "$work/log" | head -16 | cut -c1-200
      grep -E '^SUMMARY' "$work/log" | cut -c1-200
      for a in $artifacts; do echo "reproduce: build-fuzz/bin/$name $work/artifacts/$a"; done
      verdict "$name" FAIL "exit status $rc; inputs: ${artifacts:-none} in $work/artifacts/ (a new one goes into \
tests/fuzz/corpus/${fuzzers[$i]##*:}/ under a name saying what it is)"
    fi
  done
fi

echo "==== check_sanitizers ($((SECONDS - start)) s)"
printf '%s\n' "${verdicts[@]}"
if [ "$failed" -ne 0 ]; then
  echo "check_sanitizers: FAIL"
  exit 1
fi
echo "check_sanitizers: PASS"
