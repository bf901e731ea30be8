#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs Strata's main job on 2 ranks. For now that is the collectives benchmark
# (build/bin/collectives_bench); extra arguments go to it.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
mpi_flags=(--oversubscribe)
[ "$(id -u)" -eq 0 ] && mpi_flags+=(--allow-run-as-root)
exec mpirun "${mpi_flags[@]}" -np 2 build/bin/collectives_bench -b 1K -e 64M -f 4 "$@"
