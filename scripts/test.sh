#!/usr/bin/env bash
# Sets up (scripts/setup.sh), then runs the whole test suite: unit tests and the multi-rank tests at np 1 to 4.
# GPU tests skip themselves where no GPU is visible.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh "$@"
ctest --test-dir build --output-on-failure -j"$(nproc)"
