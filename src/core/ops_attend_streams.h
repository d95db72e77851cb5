// How the decode attention kernels (ops_avx2.cpp, ops_attend_decode_avx512.cpp)
// read a long KV cache from DRAM: as two streams, with V rows prefetched.
// Internal linkage: the includers are compiled for different ISAs (see
// matmul_avx512.cpp).
#pragma once

#include <xmmintrin.h>

#include <algorithm>
#include <cstdint>

#include "core/ops.h"

namespace shardlm::ops {
namespace {

// step(i) for i < n, the steps of the first and of the second half in turn,
// so two runs of cached rows are read at once. For steps whose results do not
// depend on their order.
template <class Step>
inline void in_two_streams(int64_t n, Step step) {
  const int64_t second = n - n / 2;
  for (int64_t i = 0; i < second; ++i) {
    step(i);
    if (second + i < n) step(second + i);
  }
}

// The prefetch helpers are always inlined: GCC takes a function of nothing but
// prefetches for one without side effects and drops calls it did not inline.

// How far ahead of the rows in use the decode kernels prefetch K and V, per
// stream.
constexpr int64_t kAttendAheadBytes = 2 << 10;

// Prefetches the first kAttendAheadBytes of a head's K and V rows (n_pos
// positions, elem bytes an element): the in-loop prefetches start that far
// ahead, so without these a head's first rows (all of them in a short
// context) arrive one miss at a time (on a Xeon with AMX, four heads of 25
// f16 rows from DRAM took 7.8-8.0 µs, 6.2-6.4 with these; docs/BENCHMARKS.md,
// thirty-second session).
inline __attribute__((always_inline)) void prefetch_head_start(const KvHead& kv, int64_t n_pos, int64_t elem) {
  const int64_t k_bytes = std::min(kAttendAheadBytes, n_pos * kv.k_stride * elem);
  const int64_t v_bytes = std::min(kAttendAheadBytes, n_pos * kv.v_stride * elem);
  for (int64_t b = 0; b < k_bytes; b += 64) _mm_prefetch(static_cast<const char*>(kv.k) + b, _MM_HINT_T0);
  for (int64_t b = 0; b < v_bytes; b += 64) _mm_prefetch(static_cast<const char*>(kv.v) + b, _MM_HINT_T0);
}

// Prefetches the whole V row `ahead` bytes past position p's (elem bytes an
// element).
inline __attribute__((always_inline)) void prefetch_value_row(const KvHead& kv, int64_t p, int64_t elem, int64_t ahead) {
  const auto* row = static_cast<const char*>(kv.v) + p * kv.v_stride * elem + ahead;
  for (int64_t b = 0; b < kv.dim_v * elem; b += 64) _mm_prefetch(row + b, _MM_HINT_T0);
}

}  // namespace
}  // namespace shardlm::ops
