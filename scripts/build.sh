#!/usr/bin/env bash
# build.sh [BUILD_DIR] [extra cmake args...]: configure (Release by default) and build.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
launcher=()
if command -v ccache >/dev/null; then
  # Paths under the checkout are hashed relative to it, so a second clone
  # (or CI's fresh checkout) reuses what the first compiled.
  export CCACHE_BASEDIR="$PWD"
  # Without these, every file compiled with a precompiled header (the cli's)
  # is uncacheable; the PCH holds only system-library headers.
  export CCACHE_SLOPPINESS=pch_defines,time_macros
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$dir" -G Ninja "${launcher[@]}" "$@" >/dev/null
cmake --build "$dir" -j "$(nproc)"
