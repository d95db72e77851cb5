#!/usr/bin/env bash
# build.sh [BUILD_DIR] [extra cmake args...]: configure (Release by default) and build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
