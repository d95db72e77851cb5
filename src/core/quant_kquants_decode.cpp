// Decoders of the 256-element K-quant super-blocks. Within each format the
// scale of element e is that of sub-block e/16 (Q2_K, Q3_K, Q6_K) or e/32
// (Q4_K, Q5_K); the loops below walk the bit planes in the order they are
// packed, so each comment says where element e's bits live.
#include <type_traits>
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/quant_impl.h"

namespace shardlm::quant_impl {

// Element e = 128h + 32j + l (h<2, j<4, l<32): 2 bits at qs[32h + l] >> 2j.
void dequantize_q2_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q2_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int q = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
      const uint8_t sc = b[i].scales[e / 16];
      dst[e] = d * float(sc & 0x0F) * float(q) - dmin * float(sc >> 4);
    }
  }
}

// As Q2_K for the low 2 bits; the third bit is hmask[e % 32] bit e/32, and a
// clear bit means "subtract 4".
void dequantize_q3_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q3_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
    const float d = f16_to_f32(b[i].d);
    int8_t scales[16];
    unpack_q3_k_scales(b[i].scales, scales);
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, j = (e / 32) % 4, l = e % 32;
      const int low = (b[i].qs[32 * h + l] >> (2 * j)) & 3;
      const int high = (b[i].hmask[l] >> (e / 32)) & 1;
      dst[e] = d * float(scales[e / 16]) * float(low - (high ? 0 : 4));
    }
  }
}

// Element e = 64c + 32hi + l: nibble hi of qs[32c + l]; sub-block e/32.
// Q5_K adds a fifth bit: qh[e % 32] bit e/32 (Block::qh; Q4_K has none).
template <class Block>
void dequantize_q4_q5_K(const Block* b, float* dst, int64_t n) {
  for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
    const float d = f16_to_f32(b[i].d), dmin = f16_to_f32(b[i].dmin);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      get_scale_min_k4(s, b[i].scales, &sc, &m);
      const float scale = d * float(sc), offset = dmin * float(m);
      const uint8_t* q = b[i].qs + 32 * (s / 2);
      const int shift = 4 * (s % 2);
      for (int l = 0; l < 32; ++l) {
        int code = (q[l] >> shift) & 0x0F;
        if constexpr (std::is_same_v<Block, block_q5_K>) code |= ((b[i].qh[l] >> s) & 1) << 4;
        dst[32 * s + l] = scale * float(code) - offset;
      }
    }
  }
}

void dequantize_q4_K(const void* src, float* dst, int64_t n) {
  dequantize_q4_q5_K(static_cast<const block_q4_K*>(src), dst, n);
}

void dequantize_q5_K(const void* src, float* dst, int64_t n) {
  dequantize_q4_q5_K(static_cast<const block_q5_K*>(src), dst, n);
}

// Element e = 128h + 32k + l (k<4, l<32): low nibble (k<2) or high nibble of
// ql[64h + 32(k%2) + l], top 2 bits at qh[32h + l] >> 2k; stored +32.
void dequantize_q6_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q6_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K) {
    const float d = f16_to_f32(b[i].d);
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, k = (e / 32) % 4, l = e % 32;
      const int low = (b[i].ql[64 * h + 32 * (k % 2) + l] >> (4 * (k / 2))) & 0x0F;
      const int high = (b[i].qh[32 * h + l] >> (2 * k)) & 3;
      dst[e] = d * float(b[i].scales[e / 16]) * float((low | (high << 4)) - 32);
    }
  }
}

void dequantize_q8_K(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const block_q8_K*>(src);
  for (int64_t i = 0; i < n / QK_K; ++i, dst += QK_K)
    for (int e = 0; e < QK_K; ++e) dst[e] = b[i].d * float(b[i].qs[e]);
}

}  // namespace shardlm::quant_impl
