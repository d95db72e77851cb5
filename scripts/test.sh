#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12 machine: a Release build and an
# AddressSanitizer + UndefinedBehaviorSanitizer build, each under ctest, and
# the Release build's golden tests again on the AVX2 and scalar paths.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs=$(nproc)

echo "== Release build + tests"
scripts/build.sh build
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600

echo "== golden tests on the AVX2 and scalar paths"
# SHARDLM_ISA caps the kernels' ISA: the goldens must hold on every path, not
# only the one this CPU picks.
for isa in avx2 scalar; do
  SHARDLM_ISA=$isa ctest --test-dir build --output-on-failure -j "$jobs" --timeout 600 -R Golden
done

echo "== ASan + UBSan build + tests"
# -O1 -g1: sanitizer builds compile ~2x faster than RelWithDebInfo on 2 cores
# and still report function names in stack traces.
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=None "-DCMAKE_CXX_FLAGS=-O1 -g1" "-DCMAKE_C_FLAGS=-O1 -g1" -DSHARDLM_SANITIZE=ON
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$jobs" --timeout 900
echo "== all tests passed"
