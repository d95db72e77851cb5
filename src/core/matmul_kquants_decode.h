// Decode kernels for Q2_K to Q6_K × Q8_K activations, shared by the
// AVX2 and AVX-512 files. They differ only in P::add_scaled(acc, u, s, sc):
// acc + Σ pairs of (u8 × s8) products weighted by the int16 scales sc —
// maddubs, madd, add on AVX2; maddubs and one vpdpwssd with VNNI. The sums
// are exact integers either way and are scaled in f32 exactly as the scalar
// reference does, so every ISA gives the reference's bits. Included only from
// *_avx2.cpp and *_avx512.cpp; internal linkage (see matmul_avx2_common.h).
#pragma once

#include <cstring>

#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// Q4_K/Q5_K's eight 6-bit scales and mins (12 bytes, get_scale_min_k4) as
// two vectors of 8 int16, unpacked 4 at a time in 32-bit words: scale j < 4
// is byte j & 63 and min j byte j+4 & 63; scale j >= 4 is byte j+4's low
// nibble with byte j-4's top two bits above it, min j the high nibble of
// byte j+4 with byte j's top two bits.
inline void k4_scales_mins(const uint8_t* q, __m128i& scales, __m128i& mins) {
  uint32_t w[3];
  std::memcpy(w, q, 12);
  const uint64_t sc = uint64_t(w[0] & 0x3f3f3f3f) | uint64_t((w[2] & 0x0f0f0f0f) | ((w[0] >> 2) & 0x30303030)) << 32;
  const uint64_t mn = uint64_t(w[1] & 0x3f3f3f3f) | uint64_t(((w[2] >> 4) & 0x0f0f0f0f) | ((w[1] >> 2) & 0x30303030)) << 32;
  scales = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(sc)));
  mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(int64_t(mn)));
}

// int16 lane j of `v` (8 lanes) in all 16 lanes of a 256-bit vector.
inline __m256i broadcast_lane16(__m256i v_both_halves, int j) {
  alignas(32) static constexpr uint8_t kPick[8][32] = {
#define SHARDLM_PICK(j) {2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
                         2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
                         2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, \
                         2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1, 2 * j, 2 * j + 1}
      SHARDLM_PICK(0), SHARDLM_PICK(1), SHARDLM_PICK(2), SHARDLM_PICK(3),
      SHARDLM_PICK(4), SHARDLM_PICK(5), SHARDLM_PICK(6), SHARDLM_PICK(7)};
#undef SHARDLM_PICK
  return _mm256_shuffle_epi8(v_both_halves, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick[j])));
}

// Low half: int16 lane 2q of `v`, everywhere; high half: lane 2q + 1.
inline __m256i pick_pair16(__m256i v_both_halves, int q) {
  alignas(32) static constexpr uint8_t kPick[4][32] = {
#define SHARDLM_PAIR(q) {4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, \
                         4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, 4 * q, 4 * q + 1, \
                         4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, \
                         4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3, 4 * q + 2, 4 * q + 3}
      SHARDLM_PAIR(0), SHARDLM_PAIR(1), SHARDLM_PAIR(2), SHARDLM_PAIR(3)};
#undef SHARDLM_PAIR
  return _mm256_shuffle_epi8(v_both_halves, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick[q])));
}

inline int hsum4(__m128i v) {
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm_add_epi32(v, _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(v);
}

// low | (bits j .. j+N-1 of each byte of `bits`) << 4, for j + N <= 8. One
// shift brings the bits to position 4 of their own byte (a 16-bit shift by
// at most 4 moves none across the byte boundary into the bits kept), then a
// mask and a merge: one ternary-logic op with AVX-512VL, two on AVX2. This
// header is compiled once per ISA file.
template <int N>
inline __m256i or_high_bits(__m256i low, __m256i bits, int j) {
  const __m256i mask = _mm256_set1_epi8(char(((1 << N) - 1) << 4));
  const __m256i at4 = j == 4 ? bits : j < 4 ? _mm256_slli_epi16(bits, 4 - j) : _mm256_srli_epi16(bits, j - 4);
#ifdef __AVX512VL__
  return _mm256_ternarylogic_epi32(low, at4, mask, 0xF8);  // low | (at4 & mask)
#else
  return _mm256_or_si256(low, _mm256_and_si256(at4, mask));
#endif
}

template <int KT>
constexpr int kChains = KT == 1 ? 4 : KT <= 3 ? 2 : 1;  // prefill (4 tokens) has chains enough

template <int C>
inline int sum_chains(const __m256i* acc) {
  __m256i s = acc[0];
  for (int i = 1; i < C; ++i) s = _mm256_add_epi32(s, acc[i]);
  return hsum(s);
}

// Q4_K, Q5_K and Q6_K take KT tokens at once: each 32-code chunk of the
// weight block is unpacked once and multiplied with KT activation blocks, so
// prefill pays the unpacking once per KT tokens. Each token's integer sum and
// its f32 finishing are exactly those of the one-token form (KT = 1), so the
// result does not depend on how tokens are grouped. The scales stay in
// vectors: picking one with a shuffle, and the mins' dot product with the
// activation sums as one madd, cost what the scalar unpacking and
// broadcasting cost per chunk before (decode ran at half Q4_0's speed).
template <class P, int KT, class Block>
void dot_q4_q5_k(const Block& w, const block_q8_K* const* x, const uint8_t* qh, float* out) {
  __m128i sc16, mn16;
  k4_scales_mins(w.scales, sc16, mn16);
  const __m256i scales = _mm256_broadcastsi128_si256(sc16);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i high_bits = qh ? load32(qh) : _mm256_setzero_si256();
  // Several integer chains per token (added at the end, exactly): vpdpwssd
  // waits for its accumulator several cycles, where an add waits one.
  constexpr int C = kChains<KT>;
  __m256i acc[KT][C];
  for (auto& per_token : acc)
    for (auto& v : per_token) v = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m256i raw = load32(w.qs + 32 * k);
    __m256i lo = _mm256_and_si256(raw, nibble);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
    if (qh) {
      lo = or_high_bits<1>(lo, high_bits, 2 * k);
      hi = or_high_bits<1>(hi, high_bits, 2 * k + 1);
    }
    const __m256i sc_lo = broadcast_lane16(scales, 2 * k), sc_hi = broadcast_lane16(scales, 2 * k + 1);
    for (int t = 0; t < KT; ++t) {
      acc[t][2 * k % C] = P::add_scaled(acc[t][2 * k % C], lo, load32(x[t]->qs + 64 * k), sc_lo);
      acc[t][(2 * k + 1) % C] = P::add_scaled(acc[t][(2 * k + 1) % C], hi, load32(x[t]->qs + 64 * k + 32), sc_hi);
    }
  }
  const float d = half_to_float(w.d), dmin = half_to_float(w.dmin);
  for (int t = 0; t < KT; ++t) {
    // bsums are per 16 codes, a min covers 32: add neighbours, then dot with the mins.
    const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t]->bsums)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t]->bsums + 8)));
    const int msum = hsum4(_mm_madd_epi16(mn16, pairs));
    out[t] += x[t]->d * (d * float(sum_chains<C>(acc[t])) - dmin * float(msum));
  }
}

// Q6_K's sixteen int8 scales, one per 16 codes, stay in vectors as well.
template <class P, int KT>
void dot_q6_k(const block_q6_K& w, const block_q8_K* const* x, float* out) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
  constexpr int C = kChains<KT>;  // as in dot_q4_q5_k
  __m256i acc[KT][C];
  for (auto& per_token : acc)
    for (auto& v : per_token) v = _mm256_setzero_si256();
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i ql0 = load32(w.ql + 64 * h), ql1 = load32(w.ql + 64 * h + 32);
    const __m256i qh = load32(w.qh + 32 * h);
    // Scales 8h .. 8h+7 in both halves: a quarter's pair (8h+2q, 8h+2q+1)
    // weights the low and the high 16 codes of its chunk.
    const __m256i half = h ? _mm256_permute2x128_si256(scales, scales, 0x11)
                           : _mm256_permute2x128_si256(scales, scales, 0x00);
#pragma GCC unroll 4
    for (int quarter = 0; quarter < 4; ++quarter) {
      const __m256i ql = quarter & 1 ? ql1 : ql0;
      const __m256i low = _mm256_and_si256(quarter < 2 ? ql : _mm256_srli_epi16(ql, 4), nibble);
      const __m256i q = or_high_bits<2>(low, qh, 2 * quarter);  // code + 32
      const __m256i sc = pick_pair16(half, quarter);
      for (int t = 0; t < KT; ++t)
        acc[t][(4 * h + quarter) % C] =
            P::add_scaled(acc[t][(4 * h + quarter) % C], q, load32(x[t]->qs + 128 * h + 32 * quarter), sc);
    }
  }
  const float d = half_to_float(w.d);
  for (int t = 0; t < KT; ++t) {
    const int offset = hsum(_mm256_madd_epi16(scales, load32(x[t]->bsums)));
    out[t] += x[t]->d * (d * float(sum_chains<C>(acc[t]) - 32 * offset));
  }
}

// Q2_K and Q3_K: element 128h + 32·quarter + l has its low 2 bits at bits
// 2·quarter of qs[32h + l]; Q3_K's third bit, set for code + 4, is bit
// 4h + quarter of hmask[l]. Sixteen scales, one per 16 codes, in vectors
// as Q6_K's: Q2_K's 4-bit scale and min share a byte; Q3_K's 6-bit signed
// scales are a nibble of the first 8 bytes and 2 bits of the last 4.
// Bits 2k, 2k + 1 of each byte of v (Q2_K's and Q3_K's low code bits).
inline __m256i two_bits_of(__m256i v, int k) {
  return _mm256_and_si256(k ? _mm256_srli_epi16(v, 2 * k) : v, _mm256_set1_epi8(3));
}
// low | bit b of each byte of `bits` moved to bit 2: 16-bit shifts by at
// most 5 bring in no neighbouring bit that the mask keeps (Q3_K's codes).
inline __m256i or_bit_at2(__m256i low, __m256i bits, int b) {
  const __m256i at2 = b == 2 ? bits : b < 2 ? _mm256_slli_epi16(bits, 2 - b) : _mm256_srli_epi16(bits, b - 2);
  return _mm256_or_si256(low, _mm256_and_si256(at2, _mm256_set1_epi8(4)));
}

inline __m256i q3_k_scales16(const uint8_t* packed) {
  uint32_t w[3];
  std::memcpy(w, packed, 12);
  const uint32_t low = 0x0F0F0F0F, high = 0x30303030;
  const __m128i six = _mm_setr_epi32(int((w[0] & low) | ((w[2] << 4) & high)), int((w[1] & low) | ((w[2] << 2) & high)),
                                     int(((w[0] >> 4) & low) | (w[2] & high)),
                                     int(((w[1] >> 4) & low) | ((w[2] >> 2) & high)));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(six, _mm_set1_epi8(32)));
}

// kHigh: Q3_K (codes + 4 with hmask's bit), else Q2_K.
template <class P, int KT, bool kHigh, class Block>
void dot_q2_q3_k(const Block& w, const __m256i scales, const block_q8_K* const* x, __m256i (&acc)[KT][kChains<KT>]) {
  constexpr int C = kChains<KT>;
  for (auto& per_token : acc)
    for (auto& v : per_token) v = _mm256_setzero_si256();
  __m256i hmask = _mm256_setzero_si256();
  if constexpr (kHigh) hmask = load32(w.hmask);
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const __m256i qs = load32(w.qs + 32 * h);
    const __m256i half = h ? _mm256_permute2x128_si256(scales, scales, 0x11)
                           : _mm256_permute2x128_si256(scales, scales, 0x00);
#pragma GCC unroll 4
    for (int quarter = 0; quarter < 4; ++quarter) {
      __m256i q = two_bits_of(qs, quarter);
      if constexpr (kHigh) q = or_bit_at2(q, hmask, 4 * h + quarter);
      const __m256i sc = pick_pair16(half, quarter);
      for (int t = 0; t < KT; ++t)
        acc[t][(4 * h + quarter) % C] =
            P::add_scaled(acc[t][(4 * h + quarter) % C], q, load32(x[t]->qs + 128 * h + 32 * quarter), sc);
    }
  }
}

template <class P, int KT>
void dot_q2_k(const block_q2_K& w, const block_q8_K* const* x, float* out) {
  const __m256i bytes = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
  const __m256i mins = _mm256_srli_epi16(bytes, 4);
  __m256i acc[KT][kChains<KT>];
  dot_q2_q3_k<P, KT, false>(w, _mm256_and_si256(bytes, _mm256_set1_epi16(15)), x, acc);
  const float d = half_to_float(w.d), dmin = half_to_float(w.dmin);
  for (int t = 0; t < KT; ++t) {
    const int msum = hsum(_mm256_madd_epi16(mins, load32(x[t]->bsums)));
    out[t] += x[t]->d * (d * float(sum_chains<kChains<KT>>(acc[t])) - dmin * float(msum));
  }
}

template <class P, int KT>
void dot_q3_k(const block_q3_K& w, const block_q8_K* const* x, float* out) {
  const __m256i scales = q3_k_scales16(w.scales);
  __m256i acc[KT][kChains<KT>];
  dot_q2_q3_k<P, KT, true>(w, scales, x, acc);
  const float d = half_to_float(w.d);
  for (int t = 0; t < KT; ++t) {
    const int offset = hsum(_mm256_madd_epi16(scales, load32(x[t]->bsums)));
    out[t] += x[t]->d * (d * float(sum_chains<kChains<KT>>(acc[t]) - 4 * offset));
  }
}

// The KT-token forms: D::run<KT>(w, x[KT], out[KT]) adds one weight block's
// products to KT sums.
template <class P>
struct Q2K {
  template <int KT>
  static void run(const block_q2_K& w, const block_q8_K* const* x, float* out) { dot_q2_k<P, KT>(w, x, out); }
};
template <class P>
struct Q3K {
  template <int KT>
  static void run(const block_q3_K& w, const block_q8_K* const* x, float* out) { dot_q3_k<P, KT>(w, x, out); }
};
template <class P>
struct Q4K {
  template <int KT>
  static void run(const block_q4_K& w, const block_q8_K* const* x, float* out) {
    dot_q4_q5_k<P, KT>(w, x, nullptr, out);
  }
};
template <class P>
struct Q5K {
  template <int KT>
  static void run(const block_q5_K& w, const block_q8_K* const* x, float* out) { dot_q4_q5_k<P, KT>(w, x, w.qh, out); }
};
template <class P>
struct Q6K {
  template <int KT>
  static void run(const block_q6_K& w, const block_q8_K* const* x, float* out) { dot_q6_k<P, KT>(w, x, out); }
};

inline const block_q8_K* token_blocks_k(const KernelArgs& a, int64_t t) {
  return reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t));
}

// Decode of T = 1..3 tokens: each row streams once (a line prefetched ahead
// per line consumed) and each weight block is unpacked once for all T.
template <class Block, class D, int T>
void decode_rows_k(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& m = *a.w;
  const int64_t nb = m.cols / QK_K;
  const block_q8_K* x0[T];
  for (int t = 0; t < T; ++t) x0[t] = token_blocks_k(a, t);
  for (int64_t r = r0; r < r1; ++r) {
    const auto* w = reinterpret_cast<const Block*>(m.row(r));
    float sum[T] = {};
    for (int64_t b = 0; b < nb; ++b) {
      for (size_t off = 0; off < sizeof(Block); off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(&w[b]) + kPrefetchBytes + off, _MM_HINT_T0);
      const block_q8_K* x[T];
      for (int t = 0; t < T; ++t) x[t] = x0[t] + b;
      D::template run<T>(w[b], x, sum);
    }
    for (int t = 0; t < T; ++t) a.y[t * m.rows + r] = sum[t];
  }
}

template <class Block, class D>
void decode_k(const KernelArgs& a, int64_t r0, int64_t r1) {
  switch (a.n_tokens) {
    case 1: return decode_rows_k<Block, D, 1>(a, r0, r1);
    case 2: return decode_rows_k<Block, D, 2>(a, r0, r1);
    default: return decode_rows_k<Block, D, 3>(a, r0, r1);
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
