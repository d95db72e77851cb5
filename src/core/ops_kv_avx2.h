// Cached K/V elements as f32 on 8 lanes, shared by the AVX2 attention per
// token (ops_avx2.cpp) and in blocks (ops_attend_block_avx2.cpp); include
// only from files compiled with -mavx2 -mf16c.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace shardlm::ops::avx2 {

// 8 cache elements from element i of an f16 (F16) or f32 cache as floats.
template <bool F16>
inline __m256 load8(const void* base, int64_t i) {
  if constexpr (F16)
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(base) + i)));
  else
    return _mm256_loadu_ps(static_cast<const float*>(base) + i);
}

}  // namespace shardlm::ops::avx2
