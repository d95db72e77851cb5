// Decode kernels for weights in 32-element blocks (Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0) × Q8_32 activations, shared by the AVX2 and AVX-512 files: they differ
// only in how 32 unsigned × 32 signed bytes become 8 int32 sums of 4 products
// (P::dot: maddubs + madd on AVX2, one vpdpbusd with VNNI). Integer sums are
// exact either way, so both give the same bits. Included only from *_avx2.cpp
// and *_avx512.cpp; internal linkage (see matmul_avx2_common.h).
#pragma once

#include <cstddef>
#include <cstring>

#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// Codes are unsigned bytes multiplied with the signed activation codes, and a
// block's offset (Q4_0: -8, Q5_0: -16) or minimum (Q4_1, Q5_1) is applied via
// the activation block's d·Σq: bias(block) · ds. Q8_0 codes are signed, so
// they go through the u8 × s8 product as |q| against sign(q)·a.

// The f16 field at byte `offset` of blocks w[0..3], as 4 floats. Load k
// starts 2k bytes before block k's field, so the field is its word k and three
// blends gather the four (no scalar loads and inserts). The loads stay inside
// the row: k >= 1 starts inside block k-1, and every block type here is at
// least 18 bytes long, with its f16 fields in the first 4.
template <class Block>
inline __m128 halves4(const Block* w, size_t offset) {
  static_assert(sizeof(Block) >= 18);
  const auto* base = reinterpret_cast<const uint8_t*>(w) + offset;
  auto at = [&](int k) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + k * sizeof(Block) - 2 * k));
  };
  const __m128i h = _mm_blend_epi16(_mm_blend_epi16(_mm_blend_epi16(at(0), at(1), 0x2), at(2), 0x4), at(3), 0x8);
  return _mm_cvtph_ps(h);
}

// act_sum: the activation term the bias multiplies (see block_q8_32).
struct Q4_0W {
  using Block = block_q4_0;
  static constexpr bool kSigned = false, kBias = true;
  static constexpr int kOffsetEights = 1;  // the offset 8 as a multiple of 8 (block_q8_32::minus8_sum)
  static float act_sum(const block_q8_32& x) { return x.ds; }
  static __m128 act_sum4(const Q8_32Columns& c, int64_t b) { return _mm_loadu_ps(c.ds + b); }
  static __m256i codes(const Block& b) { return unpack_nibbles(b.qs); }
  static float bias(const Block&, float d) { return -8.0f * d; }
  static __m128 bias4(const Block*, __m128 d) { return _mm_mul_ps(d, _mm_set1_ps(-8.0f)); }
};
struct Q4_1W {
  using Block = block_q4_1;
  static constexpr bool kSigned = false, kBias = true;
  static constexpr int kOffsetEights = 0;
  static float act_sum(const block_q8_32& x) { return x.s_f16; }
  static __m128 act_sum4(const Q8_32Columns& c, int64_t b) { return _mm_loadu_ps(c.s_f16 + b); }
  static __m256i codes(const Block& b) { return unpack_nibbles(b.qs); }
  static float bias(const Block& b, float) { return half_to_float(b.m); }
  static __m128 bias4(const Block* b, __m128) { return halves4(b, offsetof(Block, m)); }
};
// Q5 codes: the nibble plus 16 where the block's bit is set. AVX-512BW turns
// the 32 bits into bytes with one masked move (this header is compiled once
// per ISA file, see above).
inline __m256i q5_codes(const uint8_t* qs, const uint8_t* qh) {
  uint32_t high;
  std::memcpy(&high, qh, 4);
#ifdef __AVX512BW__
  const __m256i bit4 = _mm256_maskz_mov_epi8(__mmask32(high), _mm256_set1_epi8(0x10));
#else
  const __m256i bit4 = _mm256_and_si256(bits_to_bytes(high), _mm256_set1_epi8(0x10));
#endif
  return _mm256_or_si256(unpack_nibbles(qs), bit4);
}
struct Q5_0W {
  using Block = block_q5_0;
  static constexpr bool kSigned = false, kBias = true;
  static constexpr int kOffsetEights = 2;
  static float act_sum(const block_q8_32& x) { return x.ds; }
  static __m128 act_sum4(const Q8_32Columns& c, int64_t b) { return _mm_loadu_ps(c.ds + b); }
  static __m256i codes(const Block& b) { return q5_codes(b.qs, b.qh); }
  static float bias(const Block&, float d) { return -16.0f * d; }
  static __m128 bias4(const Block*, __m128 d) { return _mm_mul_ps(d, _mm_set1_ps(-16.0f)); }
};
struct Q5_1W {
  using Block = block_q5_1;
  static constexpr bool kSigned = false, kBias = true;
  static constexpr int kOffsetEights = 0;
  static float act_sum(const block_q8_32& x) { return x.s_f16; }
  static __m128 act_sum4(const Q8_32Columns& c, int64_t b) { return _mm_loadu_ps(c.s_f16 + b); }
  static __m256i codes(const Block& b) { return q5_codes(b.qs, b.qh); }
  static float bias(const Block& b, float) { return half_to_float(b.m); }
  static __m128 bias4(const Block* b, __m128) { return halves4(b, offsetof(Block, m)); }
};
struct Q8_0W {
  using Block = block_q8_0;
  static constexpr bool kSigned = true, kBias = false;
  static constexpr int kOffsetEights = 0;
  static float act_sum(const block_q8_32&) { return 0.0f; }
  static __m128 act_sum4(const Q8_32Columns&, int64_t) { return _mm_setzero_ps(); }
  static __m256i codes(const Block& b) { return load32(b.qs); }
  static float bias(const Block&, float) { return 0.0f; }
  static __m128 bias4(const Block*, __m128) { return _mm_setzero_ps(); }
};

template <class P, class W>
inline void block_step(const typename W::Block& wb, const block_q8_32& xb, __m256& acc, float& corr) {
  const __m256i q = W::codes(wb);
  const __m256i a = load32(xb.qs);
  const __m256i p = W::kSigned ? P::dot(_mm256_abs_epi8(q), _mm256_sign_epi8(a, q)) : P::dot(q, a);
  const float dw = half_to_float(wb.d);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xb.d), acc);
  if constexpr (W::kBias) corr += W::bias(wb, dw) * W::act_sum(xb);
}

inline const block_q8_32* token_blocks(const KernelArgs& a, int64_t t) {
  return reinterpret_cast<const block_q8_32*>(static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t));
}

// Decode is one pass over the row; per block the integer work is a handful
// of vector instructions, so scalar scale handling (f16 convert, multiply,
// broadcast, bias) used to cost as much again and kept a thread below the
// memory bandwidth. Here four blocks' scales are converted and multiplied as
// one vector, each block takes its lane with one permute, and the bias
// (offset/minimum) terms accumulate as a vector too. A few sequences decoded
// together (2-3 tokens) share each weight block's unpacking and scales; the
// tile kernel below folds 4 tokens per vector and costs about as much for 2
// tokens as for 8.

template <class P, class W, int T>
void dot_rows(const uint8_t* row, const block_q8_32* const* x, int64_t nb, float* out) {
  // Independent FMA chains per token: an FMA waits 4 cycles for the last, and
  // one token alone would otherwise chain all four blocks of an iteration.
  constexpr int A = T == 1 ? 4 : 2;
  const auto* w = reinterpret_cast<const typename W::Block*>(row);
  Q8_32Columns xc[T];
  __m256 acc[T][A];
  __m128 corr4[T];
  for (int t = 0; t < T; ++t) {
    xc[t] = q8_32_columns(x[t], nb);
    corr4[t] = _mm_setzero_ps();
    for (int i = 0; i < A; ++i) acc[t][i] = _mm256_setzero_ps();
  }
  int64_t b = 0;
  for (; b + 3 < nb; b += 4) {
    for (size_t off = 0; off < 4 * sizeof(typename W::Block); off += 64)
      _mm_prefetch(reinterpret_cast<const char*>(&w[b]) + kPrefetchBytes + off, _MM_HINT_T0);
    const __m128 dw = halves4(&w[b], offsetof(typename W::Block, d));
    __m256 scale[T];
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) scale[t] = _mm256_castps128_ps256(_mm_mul_ps(dw, _mm_loadu_ps(xc[t].d + b)));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      const __m256i q = W::codes(w[b + k]);
      const __m256i uq = W::kSigned ? _mm256_abs_epi8(q) : q;
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256i a = load32(x[t][b + k].qs);
        const __m256 p = _mm256_cvtepi32_ps(P::dot(uq, W::kSigned ? _mm256_sign_epi8(a, q) : a));
        acc[t][k % A] = _mm256_fmadd_ps(p, _mm256_permutevar8x32_ps(scale[t], _mm256_set1_epi32(k)), acc[t][k % A]);
      }
    }
    if constexpr (W::kBias) {
      const __m128 bias = W::bias4(&w[b], dw);
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) corr4[t] = _mm_fmadd_ps(bias, W::act_sum4(xc[t], b), corr4[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    float corr = 0.0f;
    for (int64_t e = b; e < nb; ++e) block_step<P, W>(w[e], x[t][e], acc[t][0], corr);
    __m256 sum = acc[t][0];
    for (int i = 1; i < A; ++i) sum = _mm256_add_ps(sum, acc[t][i]);
    const __m128 c2 = _mm_add_ps(corr4[t], _mm_movehl_ps(corr4[t], corr4[t]));
    out[t] = hsum(sum) + (_mm_cvtss_f32(_mm_add_ss(c2, _mm_movehdup_ps(c2))) + corr);
  }
}

template <class P, class W, int T>
void few_tokens(const KernelArgs& a, int64_t r0, int64_t r1) {
  const block_q8_32* x[T];
  for (int t = 0; t < T; ++t) x[t] = token_blocks(a, t);
  for (int64_t r = r0; r < r1; ++r) {
    float out[T];
    dot_rows<P, W, T>(a.w->row(r), x, a.w->cols / 32, out);
    for (int t = 0; t < T; ++t) a.y[t * a.w->rows + r] = out[t];
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
