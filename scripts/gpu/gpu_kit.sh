#!/usr/bin/env bash
# Downloads the Debian 12 packages scripts/gpu/gpu_check.sh needs into .gpu-debs/, for a GPU machine that has CUDA but
# no package registry and no MPI (the lent H200). Run it here, where apt works; then carry .gpu-debs to that machine
# (the device tool's `carry`). gpu_check.sh unpacks them with dpkg -x into a prefix (never into /) and points the
# build and the runs at it. About 16 MiB.
# Usage: scripts/gpu/gpu_kit.sh [DIR]   (default .gpu-debs; it is in .gitignore)
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${1:-.gpu-debs}
mkdir -p "$dir"
# Build dependencies (headers, CMake files, wrappers) and the shared libraries they and Open MPI's plugins load,
# except what any glibc-based image with g++ has (libc6, libstdc++6, libgcc-s1, zlib1g, libudev1, libuuid1) and the
# compiler's own runtime (libgomp1, libatomic1): an older copy first on LD_LIBRARY_PATH could lack symbol versions
# that a newer compiler there links against.
packages=(
  openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev
  libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libevent-2.1-7 libfabric1 libibverbs1
  ibverbs-providers librdmacm1 libpsm2-2 libpsm-infinipath1 libmunge2 libnl-3-200 libnl-route-3-200 libnuma1
  libucx0 ocl-icd-libopencl1
  libspdlog1.10 libspdlog-dev libfmt9 libfmt-dev libgtest-dev nlohmann-json3-dev libcli11-dev libdnnl2 libdnnl-dev
  zlib1g-dev
)
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64)
(cd "$dir" && apt-get "${o[@]}" download "${packages[@]}")
# NCCL's header, in case that machine's NCCL (a pip wheel) comes without one.
nccl_h=${NCCL_HOME:-/usr/local/cuda}/include/nccl.h
[ -f "$nccl_h" ] && mkdir -p "$dir/nccl/include" && cp "$nccl_h" "$dir/nccl/include/"
du -sh "$dir"
