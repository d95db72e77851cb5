// Reference encoders of the K-quant super-blocks (ggml's *_ref, without an
// importance matrix). Each one fits a scale per sub-block, quantizes those
// scales to 4, 6 or 8 bits against one f16 super-scale, then re-derives every
// code from the rounded scales it will be decoded with.
#include <algorithm>
#include <cmath>

#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_impl.h"
#include "core/quant_kquants_search.h"

namespace shardlm {
namespace {

using kquant_search::AffineGrid;

// Q2_K and Q3_K store 2-bit codes four to a byte: byte 32h + l holds elements
// 128h + 32k + l at bits 2k.
void pack_2bit(const uint8_t* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* e = L + 128 * h + l;
      qs[32 * h + l] = uint8_t(e[0] | (e[32] << 2) | (e[64] << 4) | (e[96] << 6));
    }
}

// Q4_K/Q5_K: low nibbles of elements 64c + l and 64c + 32 + l share byte 32c + l.
void pack_4bit_pairs(const uint8_t* L, uint8_t* qs) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) qs[32 * c + l] = uint8_t((L[64 * c + l] & 0x0F) | ((L[64 * c + 32 + l] & 0x0F) << 4));
}

// Inverse of get_scale_min_k4 for the eight 6-bit (scale, min) pairs.
void pack_scale_min_k4(const uint8_t ls[8], const uint8_t lm[8], uint8_t out[K_SCALE_SIZE]) {
  for (int j = 0; j < 4; ++j) {
    out[j] = uint8_t((ls[j] & 63) | ((ls[j + 4] >> 4) << 6));
    out[j + 4] = uint8_t((lm[j] & 63) | ((lm[j + 4] >> 4) << 6));
    out[j + 8] = uint8_t((ls[j + 4] & 0x0F) | ((lm[j + 4] & 0x0F) << 4));
  }
}

// Sub-block weights of Q4_K/Q5_K: the RMS of the group plus each |x|, so large
// elements matter more without the small ones being ignored.
void rms_plus_abs_weights(const float* x, float* w) {
  float sum_x2 = 0.f;
  for (int l = 0; l < 32; ++l) sum_x2 += x[l] * x[l];
  const float rms = std::sqrt(sum_x2 / 32.f);
  for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(x[l]);
}

// Shared by Q4_K and Q5_K (nmax 15 or 31): fills d, dmin, scales and codes L.
template <typename Block>
void encode_affine_32(const float* x, Block& b, int nmax, const AffineGrid& grid, uint8_t L[QK_K]) {
  float scales[8], mins[8], w[32];
  uint8_t scratch[32];
  float max_scale = 0.f, max_min = 0.f;
  for (int j = 0; j < 8; ++j) {
    rms_plus_abs_weights(x + 32 * j, w);
    scales[j] = kquant_search::fit_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], scratch, grid);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0.f ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0.f ? 63.f / max_min : 0.f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_scale * scales[j])));
    lm[j] = std::min<uint8_t>(63, uint8_t(nearest_int(inv_min * mins[j])));
  }
  pack_scale_min_k4(ls, lm, b.scales);
  b.d = f32_to_f16(max_scale / 63.f);
  b.dmin = f32_to_f16(max_min / 63.f);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, b.scales, &sc, &m);
    const float d = f16_to_f32(b.d) * float(sc);
    if (d == 0.f) continue;
    const float dm = f16_to_f32(b.dmin) * float(m);
    for (int i = 0; i < 32; ++i) L[32 * j + i] = uint8_t(std::clamp(nearest_int((x[32 * j + i] + dm) / d), 0, nmax));
  }
}


// Fits each 16-element sub-block with `fit` (scale out, codes into L) and
// returns the scale of largest magnitude, with its sign.
template <class Fit>
float fit_sub_blocks(const float* x, float scales[16], int8_t L[QK_K], Fit fit) {
  float largest = 0.f;
  for (int j = 0; j < 16; ++j) {
    scales[j] = fit(x + 16 * j, L + 16 * j);
    if (std::fabs(scales[j]) > std::fabs(largest)) largest = scales[j];
  }
  return largest;
}

// Final codes for the stored (rounded) scales d · sub[j]: round(x / scale)
// clamped to [lo, hi], stored as code − lo. Sub-blocks of scale 0 keep theirs.
void requantize_symmetric(const float* x, float d, const int8_t sub[16], int lo, int hi, int8_t L[QK_K]) {
  for (int j = 0; j < 16; ++j) {
    const float scale = d * float(sub[j]);
    if (scale == 0.f) continue;
    for (int l = 0; l < 16; ++l) L[16 * j + l] = int8_t(std::clamp(nearest_int(x[16 * j + l] / scale), lo, hi) - lo);
  }
}

}  // namespace

namespace quant_impl {

void quantize_q2_K(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q2_K*>(dst);
  constexpr AffineGrid grid{-0.5f, 0.1f, 15, true};
  for (int64_t i = 0; i < n / QK_K; ++i, src += QK_K) {
    uint8_t L[QK_K], scratch[16];
    float scales[16], mins[16], w[16];
    float max_scale = 0.f, max_min = 0.f;
    for (int j = 0; j < 16; ++j) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(src[16 * j + l]);
      scales[j] = kquant_search::fit_affine(16, 3, src + 16 * j, w, L + 16 * j, &mins[j], scratch, grid);
      max_scale = std::max(max_scale, scales[j]);
      max_min = std::max(max_min, mins[j]);
    }
    for (int j = 0; j < 16; ++j) b[i].scales[j] = 0;
    b[i].d = f32_to_f16(0.f);
    b[i].dmin = f32_to_f16(0.f);
    if (max_scale > 0.f) {
      const float iscale = 15.f / max_scale;
      for (int j = 0; j < 16; ++j) b[i].scales[j] = uint8_t(nearest_int(iscale * scales[j]));
      b[i].d = f32_to_f16(max_scale / 15.f);
    }
    if (max_min > 0.f) {
      const float iscale = 15.f / max_min;
      for (int j = 0; j < 16; ++j) b[i].scales[j] |= uint8_t(nearest_int(iscale * mins[j]) << 4);
      b[i].dmin = f32_to_f16(max_min / 15.f);
    }
    for (int j = 0; j < 16; ++j) {
      const float d = f16_to_f32(b[i].d) * float(b[i].scales[j] & 0x0F);
      if (d == 0.f) continue;
      const float dm = f16_to_f32(b[i].dmin) * float(b[i].scales[j] >> 4);
      for (int l = 0; l < 16; ++l) L[16 * j + l] = uint8_t(std::clamp(nearest_int((src[16 * j + l] + dm) / d), 0, 3));
    }
    pack_2bit(L, b[i].qs);
  }
}

void quantize_q3_K(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q3_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, src += QK_K) {
    int8_t L[QK_K];
    float scales[16];
    const float max_scale = fit_sub_blocks(src, scales, L, [](const float* x, int8_t* q) {
      return kquant_search::fit_symmetric_descent(16, 4, x, q);
    });
    std::memset(b[i].scales, 0, 12);
    b[i].d = f32_to_f16(0.f);
    if (max_scale != 0.f) {
      // Scales are signed 6-bit; the largest maps to -32, like the codes.
      const float iscale = -32.f / max_scale;
      for (int j = 0; j < 16; ++j) {
        const int l = std::clamp<int>(int8_t(nearest_int(iscale * scales[j])), -32, 31) + 32;
        if (j < 8)
          b[i].scales[j] = uint8_t(l & 0x0F);
        else
          b[i].scales[j - 8] |= uint8_t((l & 0x0F) << 4);
        b[i].scales[8 + j % 4] |= uint8_t((l >> 4) << (2 * (j / 4)));
      }
      b[i].d = f32_to_f16(1.f / iscale);
    }
    int8_t sub_scales[16];
    unpack_q3_k_scales(b[i].scales, sub_scales);
    requantize_symmetric(src, f16_to_f32(b[i].d), sub_scales, -4, 3, L);
    // Codes 0..7: bit 2 goes to hmask[e % 32] bit e/32, the rest to qs.
    std::memset(b[i].hmask, 0, sizeof b[i].hmask);
    uint8_t low[QK_K];
    for (int e = 0; e < QK_K; ++e) {
      if (L[e] > 3) b[i].hmask[e % 32] |= uint8_t(1u << (e / 32));
      low[e] = uint8_t(L[e] & 3);
    }
    pack_2bit(low, b[i].qs);
  }
}

void quantize_q4_K(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q4_K*>(dst);
  constexpr AffineGrid grid{-1.f, 0.1f, 20, false};
  for (int64_t i = 0; i < n / QK_K; ++i, src += QK_K) {
    uint8_t L[QK_K];
    encode_affine_32(src, b[i], 15, grid, L);
    pack_4bit_pairs(L, b[i].qs);
  }
}

void quantize_q5_K(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q5_K*>(dst);
  constexpr AffineGrid grid{-0.5f, 0.1f, 15, false};
  for (int64_t i = 0; i < n / QK_K; ++i, src += QK_K) {
    uint8_t L[QK_K];
    encode_affine_32(src, b[i], 31, grid, L);
    // Bit 4 of element e goes to qh[e % 32] bit e/32.
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int e = 0; e < QK_K; ++e)
      if (L[e] > 15) b[i].qh[e % 32] |= uint8_t(1u << (e / 32));
    pack_4bit_pairs(L, b[i].qs);
  }
}

void quantize_q6_K(const float* src, void* dst, int64_t n) {
  auto* b = static_cast<block_q6_K*>(dst);
  for (int64_t i = 0; i < n / QK_K; ++i, src += QK_K) {
    int8_t L[QK_K];
    float scales[16];
    const float max_scale = fit_sub_blocks(src, scales, L, [](const float* x, int8_t* q) {
      return kquant_search::fit_symmetric_x2(16, 32, x, q);
    });
    if (std::fabs(max_scale) < 1e-15f) {
      std::memset(&b[i], 0, sizeof b[i]);
      continue;
    }
    const float iscale = -128.f / max_scale;
    b[i].d = f32_to_f16(1.f / iscale);
    for (int j = 0; j < 16; ++j) b[i].scales[j] = int8_t(std::min(127, nearest_int(iscale * scales[j])));
    requantize_symmetric(src, f16_to_f32(b[i].d), b[i].scales, -32, 31, L);
    // Element e = 128h + 32k + l: low nibble into ql[64h + 32(k%2) + l]
    // (k < 2 low half, else high half), top 2 bits into qh[32h + l] at 2k.
    std::memset(b[i].ql, 0, sizeof b[i].ql);
    std::memset(b[i].qh, 0, sizeof b[i].qh);
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      b[i].ql[64 * h + 32 * (k % 2) + l] |= uint8_t((L[e] & 0x0F) << (4 * (k / 2)));
      b[i].qh[32 * h + l] |= uint8_t(((L[e] >> 4) & 3) << (2 * k));
    }
  }
}

}  // namespace quant_impl

void quantize_row_q8_K(const float* x, block_q8_K* y, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float amax = 0.f, max = 0.f;
    for (int j = 0; j < QK_K; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    if (amax == 0.f) {
      std::memset(&y[i], 0, sizeof y[i]);
      continue;
    }
    // -127 rather than -128 keeps every code symmetric, so kernels may negate.
    const float iscale = -127.f / max;
    for (int j = 0; j < QK_K; ++j) y[i].qs[j] = int8_t(std::min(127, nearest_int(iscale * x[j])));
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int l = 0; l < 16; ++l) sum += y[i].qs[16 * g + l];
      y[i].bsums[g] = int16_t(sum);
    }
    y[i].d = 1.f / iscale;
  }
}

}  // namespace shardlm
