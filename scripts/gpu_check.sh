#!/usr/bin/env bash
# The one prepared check for a machine with a GPU: installs what is missing, builds with CUDA for sm_90, runs the
# gpu-labelled tests and the collectives benchmark, copies the logs into $OUT (when set) and prints one verdict line.
# Usage: scripts/gpu_check.sh   (as root or with sudo; fits in about 8 minutes on one H200 with 16 cores)
# A machine without a package registry can be handed Debian packages in $STRATA_DEB_DIR (default .gpu-debs/).
set -euo pipefail
cd "$(dirname "$0")/.."

logs=build-gpu-logs
mkdir -p "$logs"
start=$(date +%s)
status_setup=skipped status_build=skipped status_tests=skipped status_bench=skipped status_train=skipped
failed=0

finish() {
  local rc=$?
  [ "$failed" -ne 0 ] && rc=1
  if [ -n "${OUT:-}" ]; then
    cp -f "$logs"/*.log "$OUT"/ 2>/dev/null || true
    cp -f build-gpu/Testing/Temporary/LastTest.log "$OUT"/ctest-last-test.log 2>/dev/null || true
  fi
  local verdict=PASS
  [ "$rc" -ne 0 ] && verdict=FAIL
  echo "gpu_check: $verdict (setup $status_setup, build $status_build, gpu tests $status_tests," \
       "bench $status_bench, train_gpt cuda $status_train; $(($(date +%s) - start)) s; logs in $logs${OUT:+ and \$OUT})"
  exit "$rc"
}
trap finish EXIT

# ---- packages: only what is missing (a tool already on PATH counts as present) ------------------------------------
packages=(openmpi-bin libopenmpi-dev libspdlog-dev libfmt-dev libgtest-dev nlohmann-json3-dev libcli11-dev cmake g++)
declare -A provides=([openmpi-bin]=mpirun [cmake]=cmake [g++]=g++)
missing=()
for p in "${packages[@]}"; do
  if [ -n "${provides[$p]:-}" ] && command -v "${provides[$p]}" >/dev/null 2>&1; then continue; fi
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
status_setup=ok
if [ ${#missing[@]} -gt 0 ]; then
  echo "gpu_check: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  deb_dir=${STRATA_DEB_DIR:-.gpu-debs}
  export DEBIAN_FRONTEND=noninteractive
  if compgen -G "$deb_dir/*.deb" >/dev/null; then
    install_cmd=("${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "$deb_dir"/*.deb)
  else
    install_cmd=(bash -c "timeout 120 ${sudo_cmd[*]} apt-get update -qq &&
                          ${sudo_cmd[*]} apt-get install -y -qq --no-install-recommends ${missing[*]}")
  fi
  if ! "${install_cmd[@]}" >"$logs/setup.log" 2>&1; then
    status_setup=failed
    tail -n 20 "$logs/setup.log"
    echo "gpu_check: could not install ${missing[*]}; without a package registry, put their .deb files in $deb_dir"
    exit 1
  fi
fi

# ---- CUDA and NCCL: nvcc outside PATH; NCCL from the CUDA tree, $NCCL_HOME, or the pip wheel nvidia-nccl ----------
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi
if [ -z "${NCCL_HOME:-}" ] && [ ! -f /usr/local/cuda/include/nccl.h ]; then
  wheel=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null || true)
  if [ -n "$wheel" ] && [ -f "$wheel/include/nccl.h" ]; then
    # The wheel ships libnccl.so.2 only; find_library needs the unversioned name.
    export NCCL_HOME=/tmp/strata-nccl
    mkdir -p "$NCCL_HOME/lib"
    ln -sfn "$wheel/include" "$NCCL_HOME/include"
    ln -sf "$wheel/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so"
    ln -sf "$wheel/lib/libnccl.so.2" "$NCCL_HOME/lib/libnccl.so.2"
    export LD_LIBRARY_PATH="$NCCL_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    echo "gpu_check: using NCCL from $wheel"
  fi
fi

nvidia-smi -L 2>&1 | tee "$logs/nvidia-smi.log"

# ---- build -----------------------------------------------------------------------------------------------------------
status_build=failed
if ! cmake -S . -B build-gpu -DSTRATA_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
    >"$logs/configure.log" 2>&1; then
  tail -n 30 "$logs/configure.log"
  exit 1
fi
if ! cmake --build build-gpu -j16 >"$logs/build.log" 2>&1; then
  grep -E "error|Error" "$logs/build.log" | head -n 40 || tail -n 40 "$logs/build.log"
  exit 1
fi
status_build=ok

# ---- tests labelled gpu (a missing registration fails rather than passing with no tests) ----------------------------
if timeout 330 ctest --test-dir build-gpu -L gpu --no-tests=error --output-on-failure --timeout 300 2>&1 |
    tee "$logs/ctest.log"; then
  status_tests=ok
else
  status_tests=failed
  failed=1
fi

# ---- benchmark (optional: built only once examples/collectives_bench exists) -----------------------------------------
bench=build-gpu/bin/collectives_bench
if [ -x "$bench" ]; then
  if timeout 180 mpirun --allow-run-as-root -np 1 "$bench" --backend cuda -b 1K -e 256M -f 4 2>&1 |
      tee "$logs/bench.log"; then
    status_bench=ok
  else
    status_bench=failed
    failed=1
  fi
else
  status_bench="absent"
fi

# ---- a short train_gpt on CUDA beside the same run on the CPU backend: losses must agree to 1e-4 ---------------------
train=build-gpu/bin/train_gpt
if [ -x "$train" ]; then
  status_train=failed
  args=(--layers 2 --heads 4 --embd 128 --vocab 512 --ctx 128 --seq 128 --batch 4 --steps 20 --zero-stage 3
        --no-progress)
  if timeout 120 mpirun --allow-run-as-root -np 1 "$train" --backend cuda "${args[@]}" --metrics "$logs/train_cuda.jsonl" \
        >"$logs/train_cuda.log" 2>&1 &&
     timeout 120 mpirun --allow-run-as-root -np 1 "$train" --backend cpu "${args[@]}" --metrics "$logs/train_cpu.jsonl" \
        >"$logs/train_cpu.log" 2>&1 &&
     python3 - "$logs/train_cuda.jsonl" "$logs/train_cpu.jsonl" <<'PY' 2>&1 | tee "$logs/train_compare.log"
import json, sys
cuda = [json.loads(l) for l in open(sys.argv[1])]
cpu = [json.loads(l) for l in open(sys.argv[2])]
worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(cuda, cpu))
ms = lambda rows: sum(r["time_ms"] for r in rows[2:]) / max(1, len(rows) - 2)
print(f"train_gpt: {len(cuda)} steps, max relative loss difference CUDA vs CPU {worst:.2e}; "
      f"mean step {ms(cuda):.1f} ms on CUDA, {ms(cpu):.1f} ms on the CPU")
sys.exit(0 if len(cuda) == len(cpu) == 20 and worst <= 1e-4 else 1)
PY
  then
    status_train=ok
  else
    tail -n 20 "$logs/train_cuda.log"
    failed=1
  fi
else
  status_train=absent
fi

