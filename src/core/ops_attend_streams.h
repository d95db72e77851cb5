// How the decode attention kernels (ops_avx2.cpp, ops_attend_decode_avx512.cpp)
// read a long KV cache from DRAM: as two streams, with V rows prefetched.
// Internal linkage: the includers are compiled for different ISAs (see
// matmul_avx512.cpp).
#pragma once

#include <xmmintrin.h>

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

// Prefetches the whole V row `ahead` bytes past position p's (elem bytes an
// element).
inline void prefetch_value_row(const KvHead& kv, int64_t p, int64_t elem, int64_t ahead) {
  const auto* row = static_cast<const char*>(kv.v) + p * kv.v_stride * elem + ahead;
  for (int64_t b = 0; b < kv.dim_v * elem; b += 64) _mm_prefetch(row + b, _MM_HINT_T0);
}

}  // namespace
}  // namespace shardlm::ops
