#!/usr/bin/env bash
# Installs what Strata needs from Debian (only what is missing), then configures and builds into build/.
# Usage: scripts/setup.sh [extra cmake arguments...]   (STRATA_CUDA=AUTO by default: CUDA is built when found)
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake openmpi-bin libopenmpi-dev libspdlog-dev libfmt-dev libgtest-dev
          nlohmann-json3-dev libcli11-dev libdnnl-dev zlib1g-dev
          pkg-config libpcre2-dev libsentencepiece-dev libutf8proc-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# nvcc lives outside PATH on these machines; AUTO finds it there.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

jobs=$(nproc)
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build build -j"$jobs"
