// Per-type reference (de)quantizers behind core/quant.h's dispatch. Internal:
// callers use dequantize_row / quantize_row. n is a multiple of the block size.
#pragma once

#include <cmath>
#include <cstdint>

namespace shardlm::quant_impl {

using DequantizeFn = void (*)(const void* src, float* dst, int64_t n);
using QuantizeFn = void (*)(const float* src, void* dst, int64_t n);

// quant_legacy.cpp: 32-element blocks.
void dequantize_q4_0(const void* src, float* dst, int64_t n);
void dequantize_q4_1(const void* src, float* dst, int64_t n);
void dequantize_q5_0(const void* src, float* dst, int64_t n);
void dequantize_q5_1(const void* src, float* dst, int64_t n);
void dequantize_q8_0(const void* src, float* dst, int64_t n);
void dequantize_q8_1(const void* src, float* dst, int64_t n);
void quantize_q4_0(const float* src, void* dst, int64_t n);
void quantize_q4_1(const float* src, void* dst, int64_t n);
void quantize_q5_0(const float* src, void* dst, int64_t n);
void quantize_q5_1(const float* src, void* dst, int64_t n);

// quant_kquants_decode.cpp / quant_kquants_encode.cpp: 256-element super-blocks.
void dequantize_q2_K(const void* src, float* dst, int64_t n);
void dequantize_q3_K(const void* src, float* dst, int64_t n);
void dequantize_q4_K(const void* src, float* dst, int64_t n);
void dequantize_q5_K(const void* src, float* dst, int64_t n);
void dequantize_q6_K(const void* src, float* dst, int64_t n);
void dequantize_q8_K(const void* src, float* dst, int64_t n);
void quantize_q2_K(const float* src, void* dst, int64_t n);
void quantize_q3_K(const float* src, void* dst, int64_t n);
void quantize_q4_K(const float* src, void* dst, int64_t n);
void quantize_q5_K(const float* src, void* dst, int64_t n);
void quantize_q6_K(const float* src, void* dst, int64_t n);

// The element of largest magnitude, keeping its sign: the symmetric formats map
// it exactly onto the most negative code so that side keeps full precision.
inline float signed_absmax(int n, const float* x) {
  float amax = 0.f, max = 0.f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return max;
}

}  // namespace shardlm::quant_impl
