// AVX2 kernels for the K-quants × Q8_K activations. Each super-block's sums
// are exact integers (codes × activation codes, weighted by the integer
// sub-block scales in madd), and are scaled in f32 exactly as the reference
// does, so these kernels reproduce the reference bit for bit. Codes carrying
// an offset (Q3_K: -4, Q6_K: -32) are multiplied unsigned and corrected with
// the activation sub-block sums (bsums). Prefill multiplies each unpacked
// Q4_K/Q5_K/Q6_K chunk with 4 tokens at a time (same per-token arithmetic).
#include <algorithm>
#include <cstring>

#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"
#include "core/quant_blocks.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

float dot_q2_k(const block_q2_K& w, const block_q8_K& x) {
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i raw = load32(w.qs + 32 * h);
    for (int j = 0; j < 4; ++j) {
      const __m256i q = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), _mm256_set1_epi8(3));
      const int s = 8 * h + 2 * j;
      acc = _mm256_add_epi32(acc, dot_u8_s8_scaled(q, load32(x.qs + 128 * h + 32 * j), w.scales[s] & 15,
                                                   w.scales[s + 1] & 15));
    }
  }
  int msum = 0;
  for (int s = 0; s < 16; ++s) msum += (w.scales[s] >> 4) * x.bsums[s];
  return x.d * (half_to_float(w.d) * float(hsum(acc)) - half_to_float(w.dmin) * float(msum));
}

float dot_q3_k(const block_q3_K& w, const block_q8_K& x) {
  int8_t sc[16];
  unpack_q3_k_scales(w.scales, sc);
  const __m256i hm = load32(w.hmask);
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    const __m256i raw = load32(w.qs + 32 * h);
    for (int j = 0; j < 4; ++j) {
      // code + 4: the two low bits plus 4 when the mask bit is set
      const __m256i low = _mm256_and_si256(_mm256_srli_epi16(raw, 2 * j), _mm256_set1_epi8(3));
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + j), _mm256_set1_epi8(1));
      const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
      const int s = 8 * h + 2 * j;
      acc = _mm256_add_epi32(acc, dot_u8_s8_scaled(q, load32(x.qs + 128 * h + 32 * j), sc[s], sc[s + 1]));
    }
  }
  int offset = 0;
  for (int s = 0; s < 16; ++s) offset += sc[s] * x.bsums[s];
  return x.d * (half_to_float(w.d) * float(hsum(acc) - 4 * offset));
}

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

// Q4_K, Q5_K and Q6_K take KT tokens at once: each 32-code chunk of the
// weight block is unpacked once and multiplied with KT activation blocks, so
// prefill pays the unpacking once per KT tokens. Each token's integer sum and
// its f32 finishing are exactly those of the one-token form (KT = 1), so the
// result does not depend on how tokens are grouped. The scales stay in
// vectors: picking one with a shuffle, and the mins' dot product with the
// activation sums as one madd, cost what the scalar unpacking and
// broadcasting cost per chunk before (decode ran at half Q4_0's speed).
template <int KT, class Block>
void dot_q4_q5_k(const Block& w, const block_q8_K* const* x, const uint8_t* qh, float* out) {
  __m128i sc16, mn16;
  k4_scales_mins(w.scales, sc16, mn16);
  const __m256i scales = _mm256_broadcastsi128_si256(sc16);
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i high_bits = qh ? load32(qh) : _mm256_setzero_si256();
  __m256i acc[KT];
  for (auto& v : acc) v = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const __m256i raw = load32(w.qs + 32 * k);
    __m256i lo = _mm256_and_si256(raw, nibble);
    __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
    if (qh) {
      lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high_bits, 2 * k), one), 4));
      hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high_bits, 2 * k + 1), one), 4));
    }
    const __m256i sc_lo = broadcast_lane16(scales, 2 * k), sc_hi = broadcast_lane16(scales, 2 * k + 1);
    for (int t = 0; t < KT; ++t) {
      acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(x[t]->qs + 64 * k)), sc_lo));
      acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(x[t]->qs + 64 * k + 32)), sc_hi));
    }
  }
  const float d = half_to_float(w.d), dmin = half_to_float(w.dmin);
  for (int t = 0; t < KT; ++t) {
    // bsums are per 16 codes, a min covers 32: add neighbours, then dot with the mins.
    const __m128i pairs = _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t]->bsums)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t]->bsums + 8)));
    const int msum = hsum4(_mm_madd_epi16(mn16, pairs));
    out[t] += x[t]->d * (d * float(hsum(acc[t])) - dmin * float(msum));
  }
}

// Q6_K's sixteen int8 scales, one per 16 codes, stay in vectors as well.
template <int KT>
void dot_q6_k(const block_q6_K& w, const block_q8_K* const* x, float* out) {
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const __m256i scales = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.scales)));
  __m256i acc[KT];
  for (auto& v : acc) v = _mm256_setzero_si256();
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
      const __m256i high = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * quarter), _mm256_set1_epi8(3));
      const __m256i q = _mm256_or_si256(low, _mm256_slli_epi16(high, 4));  // code + 32
      const __m256i sc = pick_pair16(half, quarter);
      for (int t = 0; t < KT; ++t)
        acc[t] = _mm256_add_epi32(
            acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(q, load32(x[t]->qs + 128 * h + 32 * quarter)), sc));
    }
  }
  const float d = half_to_float(w.d);
  for (int t = 0; t < KT; ++t) {
    const int offset = hsum(_mm256_madd_epi16(scales, load32(x[t]->bsums)));
    out[t] += x[t]->d * (d * float(hsum(acc[t]) - 32 * offset));
  }
}

// The KT-token form of every type: Dot<KT>::run(w, x[KT], out[KT]) adds one
// weight block's products to KT sums. Q2_K/Q3_K still unpack once per token.
template <class Block, float (*F)(const Block&, const block_q8_K&)>
struct PerToken {
  template <int KT>
  struct Dot {
    static void run(const Block& w, const block_q8_K* const* x, float* out) {
      for (int t = 0; t < KT; ++t) out[t] += F(w, *x[t]);
    }
  };
};
template <int KT>
struct Q4K {
  static void run(const block_q4_K& w, const block_q8_K* const* x, float* out) { dot_q4_q5_k<KT>(w, x, nullptr, out); }
};
template <int KT>
struct Q5K {
  static void run(const block_q5_K& w, const block_q8_K* const* x, float* out) { dot_q4_q5_k<KT>(w, x, w.qh, out); }
};
template <int KT>
struct Q6K {
  static void run(const block_q6_K& w, const block_q8_K* const* x, float* out) { dot_q6_k<KT>(w, x, out); }
};

// Prefill walks blocks of 16 rows: a block's weights stay in L2 while the
// activations of each group of kTokens tokens, in L1, meet all 16 rows.
// Dot<KT>(w, x[KT], out[KT]) adds one weight block's products to KT sums.
template <class Block, template <int> class Dot>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  constexpr int64_t kRowBlock = 16;
  constexpr int kTokens = 4;
  const MatrixView& m = *a.w;
  const int64_t nb = m.cols / QK_K;
  const auto token = [&](int64_t t) {
    return reinterpret_cast<const block_q8_K*>(static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t));
  };
  for (int64_t rb = r0; rb < r1; rb += kRowBlock) {
    const int64_t rend = std::min(rb + kRowBlock, r1);
    int64_t t = 0;
    for (; t + kTokens <= a.n_tokens; t += kTokens) {
      const block_q8_K* x[kTokens];
      for (int64_t r = rb; r < rend; ++r) {
        const auto* w = reinterpret_cast<const Block*>(m.row(r));
        float sum[kTokens] = {};
        for (int64_t b = 0; b < nb; ++b) {
          for (int j = 0; j < kTokens; ++j) x[j] = token(t + j) + b;
          Dot<kTokens>::run(w[b], x, sum);
        }
        for (int j = 0; j < kTokens; ++j) a.y[(t + j) * m.rows + r] = sum[j];
      }
    }
    for (; t < a.n_tokens; ++t) {
      for (int64_t r = rb; r < rend; ++r) {
        const auto* w = reinterpret_cast<const Block*>(m.row(r));
        float sum = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          // Decode streams the row: a line ahead per line consumed.
          for (size_t off = 0; off < sizeof(Block); off += 64)
            _mm_prefetch(reinterpret_cast<const char*>(&w[b]) + kPrefetchBytes + off, _MM_HINT_T0);
          const block_q8_K* x = token(t) + b;
          Dot<1>::run(w[b], &x, &sum);
        }
        a.y[t * m.rows + r] = sum;
      }
    }
  }
}

}  // namespace

Kernel avx2_kquant_kernel(DType type) {
  switch (type) {
    case DType::Q2_K: return kernel<block_q2_K, PerToken<block_q2_K, dot_q2_k>::Dot>;
    case DType::Q3_K: return kernel<block_q3_K, PerToken<block_q3_K, dot_q3_k>::Dot>;
    case DType::Q4_K: return kernel<block_q4_K, Q4K>;
    case DType::Q5_K: return kernel<block_q5_K, Q5K>;
    case DType::Q6_K: return kernel<block_q6_K, Q6K>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
