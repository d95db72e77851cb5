// The 32-element block formats. Rounding follows ggml's reference quantizers
// exactly (the scale is computed in f32 and only then stored as f16; the
// inverse scale comes from the unrounded f32 value), so re-quantizing a row
// gives the same bytes llama-quantize wrote.
#include <algorithm>
#include <cmath>

#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_impl.h"

namespace shardlm {
namespace {

constexpr int QK = 32;
constexpr int HALF = QK / 2;

float inverse_or_zero(float d) { return d != 0.f ? 1.f / d : 0.f; }

void min_max(const float* x, float* lo, float* hi) {
  *lo = x[0];
  *hi = x[0];
  for (int j = 1; j < QK; ++j) {
    *lo = std::min(*lo, x[j]);
    *hi = std::max(*hi, x[j]);
  }
}

float absmax(const float* x) {
  float amax = 0.f;
  for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
  return amax;
}

void store_q5_high_bits(uint8_t qh_out[4], const int codes[QK]) {
  uint32_t qh = 0;
  for (int j = 0; j < QK; ++j) qh |= uint32_t((codes[j] >> 4) & 1) << j;
  std::memcpy(qh_out, &qh, 4);
}

}  // namespace

namespace quant_impl {

// Low nibble of qs[j] holds element j, high nibble element j+16.
void dequantize_q4_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q4_0*>(src);
  for (int64_t i = 0; i < n / QK; ++i, dst += QK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < HALF; ++j) {
      dst[j] = float((b[i].qs[j] & 0x0F) - 8) * d;
      dst[j + HALF] = float((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void quantize_q4_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_0*>(dst);
  for (int64_t i = 0; i < n / QK; ++i, src += QK) {
    const float d = quant_impl::signed_absmax(QK, src) / -8.f;
    const float id = inverse_or_zero(d);
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < HALF; ++j) {
      // Truncation after +8.5 is round-half-up of x/d + 8; the one value that
      // can reach 16 (the opposite extreme) is clamped.
      const int lo = std::min(15, int(int8_t(src[j] * id + 8.5f)));
      const int hi = std::min(15, int(int8_t(src[j + HALF] * id + 8.5f)));
      b[i].qs[j] = uint8_t(lo | (hi << 4));
    }
  }
}

void dequantize_q4_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q4_1*>(src);
  for (int64_t i = 0; i < n / QK; ++i, dst += QK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < HALF; ++j) {
      dst[j] = float(b[i].qs[j] & 0x0F) * d + m;
      dst[j + HALF] = float(b[i].qs[j] >> 4) * d + m;
    }
  }
}

void quantize_q4_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_1*>(dst);
  for (int64_t i = 0; i < n / QK; ++i, src += QK) {
    float lo, hi;
    min_max(src, &lo, &hi);
    const float d = (hi - lo) / 15.f;
    const float id = inverse_or_zero(d);
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(lo);
    for (int j = 0; j < HALF; ++j) {
      const int q0 = std::min(15, int(int8_t((src[j] - lo) * id + 0.5f)));
      const int q1 = std::min(15, int(int8_t((src[j + HALF] - lo) * id + 0.5f)));
      b[i].qs[j] = uint8_t(q0 | (q1 << 4));
    }
  }
}

void dequantize_q5_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q5_0*>(src);
  for (int64_t i = 0; i < n / QK; ++i, dst += QK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < HALF; ++j) {
      dst[j] = float(((b[i].qs[j] & 0x0F) | q5_high_bit(b[i].qh, j)) - 16) * d;
      dst[j + HALF] = float(((b[i].qs[j] >> 4) | q5_high_bit(b[i].qh, j + HALF)) - 16) * d;
    }
  }
}

void quantize_q5_0(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_0*>(dst);
  for (int64_t i = 0; i < n / QK; ++i, src += QK) {
    const float d = quant_impl::signed_absmax(QK, src) / -16.f;
    const float id = inverse_or_zero(d);
    b[i].d = f32_to_f16(d);
    int codes[QK];
    for (int j = 0; j < QK; ++j) codes[j] = std::min(31, int(int8_t(src[j] * id + 16.5f)));
    for (int j = 0; j < HALF; ++j) b[i].qs[j] = uint8_t((codes[j] & 0x0F) | ((codes[j + HALF] & 0x0F) << 4));
    store_q5_high_bits(b[i].qh, codes);
  }
}

void dequantize_q5_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q5_1*>(src);
  for (int64_t i = 0; i < n / QK; ++i, dst += QK) {
    const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
    for (int j = 0; j < HALF; ++j) {
      dst[j] = float((b[i].qs[j] & 0x0F) | q5_high_bit(b[i].qh, j)) * d + m;
      dst[j + HALF] = float((b[i].qs[j] >> 4) | q5_high_bit(b[i].qh, j + HALF)) * d + m;
    }
  }
}

void quantize_q5_1(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_1*>(dst);
  for (int64_t i = 0; i < n / QK; ++i, src += QK) {
    float lo, hi;
    min_max(src, &lo, &hi);
    const float d = (hi - lo) / 31.f;
    const float id = inverse_or_zero(d);
    b[i].d = f32_to_f16(d);
    b[i].m = f32_to_f16(lo);
    int codes[QK];
    // The reference does not clamp here; (hi-lo)*id + 0.5 stays below 32 for any
    // finite input, and the mask keeps a rounding overshoot inside the code.
    for (int j = 0; j < QK; ++j) codes[j] = int(uint8_t((src[j] - lo) * id + 0.5f)) & 31;
    for (int j = 0; j < HALF; ++j) b[i].qs[j] = uint8_t((codes[j] & 0x0F) | ((codes[j + HALF] & 0x0F) << 4));
    store_q5_high_bits(b[i].qh, codes);
  }
}

void dequantize_q8_0(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q8_0*>(src);
  for (int64_t i = 0; i < n / QK; ++i, dst += QK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < QK; ++j) dst[j] = float(b[i].qs[j]) * d;
  }
}

void dequantize_q8_1(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q8_1*>(src);
  for (int64_t i = 0; i < n / QK; ++i, dst += QK) {
    const float d = f16_to_f32(b[i].d);
    for (int j = 0; j < QK; ++j) dst[j] = float(b[i].qs[j]) * d;
  }
}

}  // namespace quant_impl

void quantize_row_q8_0(const float* x, block_q8_0* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = absmax(x) / 127.f;
    const float id = inverse_or_zero(d);
    y[i].d = f32_to_f16(d);
    for (int j = 0; j < QK; ++j) y[i].qs[j] = int8_t(std::round(x[j] * id));
  }
}

void quantize_row_q8_1(const float* x, block_q8_1* y, int64_t n) {
  for (int64_t i = 0; i < n / QK; ++i, x += QK) {
    const float d = absmax(x) / 127.f;
    const float id = inverse_or_zero(d);
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
      y[i].qs[j] = int8_t(std::round(x[j] * id));
      sum += y[i].qs[j];
    }
    y[i].d = f32_to_f16(d);
    y[i].s = f32_to_f16(float(sum) * d);
  }
}

}  // namespace shardlm
