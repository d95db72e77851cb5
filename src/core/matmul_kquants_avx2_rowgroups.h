// AVX2 prefill (>= 4 tokens) for the K-quant weights × Q8_K
// activations on rows interleaved 8 at a time, as matmul_avx2_rowgroups.h
// does for 32-element blocks: a vector's dword lanes are 8 rows, the token's
// dword is broadcast, so each lane ends a sub-block with its row's exact sum,
// which madd weights by that row's sub-block scale. The integer sums and the
// f32 finishing per super-block are the reference's. The types differ only
// in how a block unpacks (codes, scales, the bias term): a small policy each.
// Included only from matmul_kquants_avx2.cpp and
// matmul_kquant_panels_avx2.cpp; internal linkage (see matmul_avx2_common.h).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/matmul_avx2_common.h"
#include "core/matmul_avx2_rowgroup_driver.h"
#include "core/matmul_kernels.h"
#include "core/matmul_kquants_decode.h"
#include "core/quant_blocks.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// A policy K describes one type:
//   Block; kSubElems: codes per scale (32 or 16); kSum16: how many maddubs
//   results an int16 lane may add before it could overflow (each is a pair
//   of code · activation, |activation| ≤ 128: ≤ 2·15·128 for 4-bit codes,
//   2·31·128 for 5-bit, 2·63·128 for 6-bit; a run stays in one sub-block);
//   chunk(block, j): elements 32j .. 32j+31 as unsigned codes, in order;
//   scales(block, sc, bias): the kSub integer scales and the kSub integer
//   weights of the activation sums of the same sub-blocks (the mins);
//   with kSignedCodes (codes stored with an offset, see Q6KRows) only
//   scales(block, sc): their offset term is made at interleave time;
//   finish(d, dmin, isum, bsum): the super-block's f32 value before the
//   activation scale, as the reference computes it.
// d and dmin (0 where the block has none) are the block's f16 fields.
template <class K>
constexpr int kSub = QK_K / K::kSubElems;

// One super-block of 8 rows.
template <class K>
struct KRowGroup {
  uint8_t codes[8][8][32];         // [j][v][4·row + e]: element 32j + 4v + e
  int16_t scales[kSub<K>][16];     // [s]: row i's scale of sub-block s in lanes 2i, 2i+1
  int16_t bias[kSub<K> / 2][16];   // [p]: row i's bias weights of sub-blocks 2p, 2p+1 in lanes 2i, 2i+1 (not kSignedCodes)
  float d[kPGroupRows], dmin[kPGroupRows];
  int32_t shift_term[kPGroupRows];  // kSignedCodes: −128 · Σ scale · Σ signed code, per row
};

// Types with a minimum per sub-block: d · isum − dmin · Σ min · (activation sum).
struct SubtractMins {
  static constexpr bool kSignedCodes = false;
  static __m256 finish(__m256 d, __m256 dmin, __m256i isum, __m256i bsum) {
    return _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)), _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(bsum)));
  }
};
// Codes stored + offset, interleaved as signed codes (Q6KRows): the tile's
// integer sum starts from the offset term (shift_term), so it is the
// reference's Σ scale · (code − offset) · a, and the value d · isum.
struct SignedCodes {
  static constexpr bool kSignedCodes = true;
  static __m256 finish(__m256 d, __m256, __m256i isum, __m256i) { return _mm256_mul_ps(d, _mm256_cvtepi32_ps(isum)); }
};

// Element 32j + l of a Q2_K/Q3_K block: bits 2(j % 4), 2(j % 4) + 1 of qs[32 (j / 4) + l].
inline __m256i two_bits(const uint8_t* qs, int j) { return two_bits_of(load32(qs + 32 * (j / 4)), j % 4); }

struct Q2KRows : SubtractMins {
  using Block = block_q2_K;
  static constexpr int kSubElems = 16, kSum16 = 4;
  static __m256i chunk(const Block& b, int j) { return two_bits(b.qs, j); }
  static void scales(const Block& b, int16_t sc[16], int16_t bias[16]) {
    for (int s = 0; s < 16; ++s) sc[s] = b.scales[s] & 15, bias[s] = b.scales[s] >> 4;
  }
};

// Code + 4 (0..7): the two low bits, and 4 where bit j of hmask[l] is set.
// Interleaved as signed codes, as Q6KRows.
struct Q3KRows : SignedCodes {
  using Block = block_q3_K;
  static constexpr int kSubElems = 16, kSum16 = 4, kCodeOffset = 4;
  static __m256i chunk(const Block& b, int j) { return or_bit_at2(two_bits(b.qs, j), load32(b.hmask), j); }
  static void scales(const Block& b, int16_t sc[16]) {
    int8_t unpacked[16];
    unpack_q3_k_scales(b.scales, unpacked);
    for (int s = 0; s < 16; ++s) sc[s] = unpacked[s];
  }
};

// Q4_K and Q5_K share the 12-byte scales and mins and the nibble layout:
// element 32j + l is the low (j even) or high nibble of qs[32 (j / 2) + l].
template <class B>
struct Q4Q5KRows : SubtractMins {
  using Block = B;
  static constexpr int kSubElems = 32;
  static __m256i nibbles(const Block& b, int j) {
    const __m256i raw = load32(b.qs + 32 * (j / 2));
    return _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
  }
  static void scales(const Block& b, int16_t sc[8], int16_t bias[8]) {
    __m128i s, m;
    k4_scales_mins(b.scales, s, m);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(sc), s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(bias), m);
  }
};

struct Q4KRows : Q4Q5KRows<block_q4_K> {
  static constexpr int kSum16 = 8;
  static __m256i chunk(const Block& b, int j) { return nibbles(b, j); }
};

// A fifth bit per code: bit j of qh[l] for element 32j + l.
struct Q5KRows : Q4Q5KRows<block_q5_K> {
  static constexpr int kSum16 = 4;
  static __m256i chunk(const Block& b, int j) { return or_high_bits<1>(nibbles(b, j), load32(b.qh), j); }
};

// Code + 32 (0..63): a nibble of ql and two bits of qh.
// Interleaved as signed codes (−32..31), which multiply the activations + 128
// (unsigned): Σ code · (a + 128) − 128 · Σ code is the reference's integer
// Σ (code + 32) · a − 32 · Σ a, and its second term depends on the row alone,
// so it is made once per interleaved super-block (shift_term) instead of a
// product with the activation sums per token. Pairs of products stay within
// ±2 · 255 · 32, so int16 lanes still add two maddubs results.
struct Q6KRows : SignedCodes {
  using Block = block_q6_K;
  static constexpr int kSubElems = 16, kSum16 = 2, kCodeOffset = 32;
  static __m256i chunk(const Block& b, int j) {
    const int h = j / 4, quarter = j % 4;
    const __m256i ql = load32(b.ql + 64 * h + 32 * (quarter & 1));
    const __m256i low = _mm256_and_si256(quarter < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    return or_high_bits<2>(low, load32(b.qh + 32 * h), 2 * quarter);
  }
  static void scales(const Block& b, int16_t sc[16]) {
    for (int s = 0; s < 16; ++s) sc[s] = b.scales[s];
  }
};

// Rows [rb, rend) as groups of 8 (the last row repeated past rend), group g's
// super-block b at out[g · nb + b].
template <class K>
void interleave_k(const MatrixView& m, int64_t rb, int64_t rend, int64_t nb, KRowGroup<K>* out) {
  using Block = typename K::Block;
  for (int64_t r = rb, g = 0; r < rend; r += kPGroupRows, ++g) {
    const Block* w[kPGroupRows];
    for (int i = 0; i < kPGroupRows; ++i)
      w[i] = reinterpret_cast<const Block*>(m.row(std::min<int64_t>(r + i, rend - 1)));
    for (int64_t b = 0; b < nb; ++b) {
      KRowGroup<K>& dst = out[g * nb + b];
      int16_t sc[kPGroupRows][kSub<K>];
      for (int i = 0; i < kPGroupRows; ++i) {
        if constexpr (K::kSignedCodes) {
          K::scales(w[i][b], sc[i]);
        } else {
          int16_t bias[kSub<K>];
          K::scales(w[i][b], sc[i], bias);
          for (int p = 0; p < kSub<K> / 2; ++p) dst.bias[p][2 * i] = bias[2 * p], dst.bias[p][2 * i + 1] = bias[2 * p + 1];
        }
        for (int s = 0; s < kSub<K>; ++s) dst.scales[s][2 * i] = dst.scales[s][2 * i + 1] = sc[i][s];
        dst.d[i] = half_to_float(w[i][b].d);
        if constexpr (requires { w[i][b].dmin; })
          dst.dmin[i] = half_to_float(w[i][b].dmin);
        else
          dst.dmin[i] = 0.0f;
        dst.shift_term[i] = 0;
      }
      for (int j = 0; j < 8; ++j) {
        __m256i codes[kPGroupRows], by_v[8];
        for (int i = 0; i < kPGroupRows; ++i) {
          codes[i] = K::chunk(w[i][b], j);
          if constexpr (K::kSignedCodes) {
            static_assert(K::kSubElems == 16, "two sub-blocks per chunk");
            // Sums of the 8-code quarters of the chunk: sub-blocks 2j and 2j + 1.
            uint64_t quarter[4];
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(quarter), _mm256_sad_epu8(codes[i], _mm256_setzero_si256()));
            for (int h = 0; h < 2; ++h) {
              const int code_sum = int(quarter[2 * h] + quarter[2 * h + 1]) - 16 * K::kCodeOffset;
              dst.shift_term[i] -= 128 * sc[i][2 * j + h] * code_sum;
            }
            codes[i] = _mm256_sub_epi8(codes[i], _mm256_set1_epi8(K::kCodeOffset));
          }
        }
        transpose8x8_dwords(codes, by_v);
        for (int v = 0; v < 8; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.codes[j][v]), by_v[v]);
      }
    }
  }
}

// A token's super-block as the tile reads it (a copy per token tile, made
// once for every row group of a row block): codes + 128 with kSignedCodes,
// and the activation sums of each of the type's sub-blocks.
struct TileTokenBlock {
  float d;
  int8_t qs[QK_K];
  int16_t sub_sums[16];  // kSub<K> of them; bsums are per 16 codes, so 32-code sub-blocks add neighbours
};

// Token t's blocks for policy K, in tile place `slot`'s buffer. Slot 0 comes
// first in a tile, so the buffer grows (and moves) only before the tile's
// other places are filled.
template <class K>
const TileTokenBlock* tile_token_blocks(const KernelArgs& a, int64_t t, int slot) {
  thread_local std::vector<TileTokenBlock> places;
  const int64_t nb = a.w->cols / QK_K;
  if (slot == 0 && places.size() < size_t(kPTokens * nb)) places.resize(size_t(kPTokens * nb));
  const block_q8_K* src = token_blocks_k(a, t);
  TileTokenBlock* dst = places.data() + slot * nb;
  for (int64_t b = 0; b < nb; ++b) {
    dst[b].d = src[b].d;
    for (int k = 0; k < QK_K; k += 32) {
      __m256i q = load32(src[b].qs + k);
      if constexpr (K::kSignedCodes) q = _mm256_xor_si256(q, _mm256_set1_epi8(int8_t(0x80)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[b].qs + k), q);
    }
    const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[b].bsums));
    const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[b].bsums + 8));
    if constexpr (K::kSubElems == 32) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[b].sub_sums), _mm_hadd_epi16(lo, hi));
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[b].sub_sums), lo);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(dst[b].sub_sums + 8), hi);
    }
  }
  return dst;
}

// acc plus a super-block's f32 value for 8 rows × one token: the
// reference's finishing (K::finish) times the token's scale. Every kernel on
// K-quant row groups (tile_k, the panel decode of
// matmul_kquant_panels_avx2.cpp) ends a super-block here, so a row's result
// has the same bits in each.
template <class K>
inline __m256 add_super_block(__m256 acc, float xd, __m256 d, __m256 dmin, __m256i isum, __m256i bsum) {
  return _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(xd), K::finish(d, dmin, isum, bsum)));
}

// 8 interleaved rows × kPTokens tokens over nb super-blocks: out[t] lane i is
// row i's sum for token t.
template <class K>
void tile_k(const KRowGroup<K>* wb, const TileTokenBlock* const* x, int64_t nb, __m256 out[kPTokens]) {
  constexpr int S = K::kSum16, kSubVectors = K::kSubElems / 4;
  static_assert(kSubVectors % S == 0, "an int16 run must not cross a sub-block");
  __m256 acc[kPTokens];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const KRowGroup<K>& p = wb[b];
    // Each token's running sum is one chain (in_order), so the compiler does
    // not hold every scaled product of the super-block at once and spill them.
    __m256i isum[kPTokens];
    for (auto& sum : isum) sum = K::kSignedCodes ? load32(p.shift_term) : _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const int16_t(*scales)[16] = p.scales + j * (32 / K::kSubElems);  // the chunk's sub-blocks
      __m256i s16[kPTokens];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i q = load32(p.codes[j][v]);
#pragma GCC unroll 4
        for (int t = 0; t < kPTokens; ++t) {
          int32_t a4;
          std::memcpy(&a4, x[t][b].qs + 32 * j + 4 * v, 4);
          const __m256i act = _mm256_set1_epi32(a4);
          const __m256i prod = K::kSignedCodes ? _mm256_maddubs_epi16(act, q) : _mm256_maddubs_epi16(q, act);
          s16[t] = v % S == 0 ? prod : in_order(_mm256_add_epi16(s16[t], prod));
        }
        if (v % S == S - 1) {
          const __m256i sc = load32(scales[4 * v / K::kSubElems]);
#pragma GCC unroll 4
          for (int t = 0; t < kPTokens; ++t) isum[t] = in_order(_mm256_add_epi32(isum[t], _mm256_madd_epi16(s16[t], sc)));
        }
      }
    }
    const __m256 d = _mm256_loadu_ps(p.d), dmin = _mm256_loadu_ps(p.dmin);
    for (int t = 0; t < kPTokens; ++t) {
      __m256i bsum = _mm256_setzero_si256();
      if constexpr (!K::kSignedCodes) {
        for (int q = 0; q < kSub<K> / 2; ++q) {
          int32_t pair;
          std::memcpy(&pair, x[t][b].sub_sums + 2 * q, 4);
          bsum = _mm256_add_epi32(bsum, _mm256_madd_epi16(load32(p.bias[q]), _mm256_set1_epi32(pair)));
        }
      }
      acc[t] = add_super_block<K>(acc[t], x[t][b].d, d, dmin, isum[t], bsum);
    }
  }
  for (int t = 0; t < kPTokens; ++t) out[t] = acc[t];
}

// Rows [r0, r1) of every token (n_tokens >= 4; matmul_avx2_rowgroup_driver.h).
template <class K>
void prefill_k_rowgroups(const KernelArgs& a, int64_t r0, int64_t r1) {
  prefill_row_groups<KRowGroup<K>, TileTokenBlock>(a, r0, r1, a.w->cols / QK_K, interleave_k<K>, tile_k<K>,
                                                   tile_token_blocks<K>);
}

}  // namespace
}  // namespace shardlm::matmul_impl
