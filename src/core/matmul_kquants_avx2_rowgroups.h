// AVX2 prefill (>= 4 tokens) for Q4_K weights × Q8_K activations on rows
// interleaved 8 at a time, as matmul_avx2_rowgroups.h does for 32-element
// blocks: a vector's dword lanes are 8 rows, the token's dword is broadcast,
// so each lane ends a sub-block with its row's exact sum, which madd weights
// by that row's sub-block scale. The integer sums and the f32 finishing per
// super-block are the reference's. Included only from
// matmul_kquants_avx2.cpp; internal linkage (see matmul_avx2_common.h).
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

// One super-block of 8 rows.
struct Q4KRowGroup {
  uint8_t codes[8][8][32];  // [sub-block j][v][4·row + e]: element 32j + 4v + e
  int16_t scales[8][16];    // [j]: row i's scale of sub-block j in lanes 2i, 2i+1
  int16_t mins[4][16];      // [p]: row i's mins of sub-blocks 2p, 2p+1 in lanes 2i, 2i+1
  float d[kPGroupRows], dmin[kPGroupRows];
};

// Rows [rb, rend) as groups of 8 (the last row repeated past rend), group g's
// super-block b at out[g · nb + b].
inline void interleave_q4_k(const MatrixView& m, int64_t rb, int64_t rend, int64_t nb, Q4KRowGroup* out) {
  for (int64_t r = rb, g = 0; r < rend; r += kPGroupRows, ++g) {
    const block_q4_K* w[kPGroupRows];
    for (int i = 0; i < kPGroupRows; ++i)
      w[i] = reinterpret_cast<const block_q4_K*>(m.row(std::min<int64_t>(r + i, rend - 1)));
    for (int64_t b = 0; b < nb; ++b) {
      Q4KRowGroup& dst = out[g * nb + b];
      for (int i = 0; i < kPGroupRows; ++i) {
        const block_q4_K& blk = w[i][b];
        __m128i sc, mn;
        k4_scales_mins(blk.scales, sc, mn);
        int16_t s[8], n[8];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(s), sc);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(n), mn);
        for (int j = 0; j < 8; ++j) dst.scales[j][2 * i] = dst.scales[j][2 * i + 1] = s[j];
        for (int p = 0; p < 4; ++p) dst.mins[p][2 * i] = n[2 * p], dst.mins[p][2 * i + 1] = n[2 * p + 1];
        dst.d[i] = half_to_float(blk.d);
        dst.dmin[i] = half_to_float(blk.dmin);
      }
      for (int j = 0; j < 8; ++j) {
        __m256i codes[kPGroupRows], by_v[8];
        for (int i = 0; i < kPGroupRows; ++i) {
          const __m256i raw = load32(w[i][b].qs + 32 * (j / 2));
          codes[i] = _mm256_and_si256(j % 2 ? _mm256_srli_epi16(raw, 4) : raw, _mm256_set1_epi8(0x0F));
        }
        transpose8x8_dwords(codes, by_v);
        for (int v = 0; v < 8; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.codes[j][v]), by_v[v]);
      }
    }
  }
}

// 8 interleaved rows × kPTokens tokens over nb super-blocks: out[t] lane i is
// row i's sum for token t.
inline void tile_q4_k(const Q4KRowGroup* wb, const block_q8_K* const* x, int64_t nb, __m256 out[kPTokens]) {
  __m256 acc[kPTokens];
  for (auto& v : acc) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const Q4KRowGroup& p = wb[b];
    __m256i isum[kPTokens];
    for (int j = 0; j < 8; ++j) {
      const __m256i sc = load32(p.scales[j]);
      __m256i s16[kPTokens];
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v) {
        const __m256i q = load32(p.codes[j][v]);
#pragma GCC unroll 4
        for (int t = 0; t < kPTokens; ++t) {
          int32_t a4;
          std::memcpy(&a4, x[t][b].qs + 32 * j + 4 * v, 4);
          // 8 products of ≤ 2·15·128 fit int16
          const __m256i prod = _mm256_maddubs_epi16(q, _mm256_set1_epi32(a4));
          s16[t] = v == 0 ? prod : _mm256_add_epi16(s16[t], prod);
        }
      }
      for (int t = 0; t < kPTokens; ++t) {
        const __m256i scaled = _mm256_madd_epi16(s16[t], sc);
        isum[t] = j == 0 ? scaled : _mm256_add_epi32(isum[t], scaled);
      }
    }
    const __m256 d = _mm256_loadu_ps(p.d), dmin = _mm256_loadu_ps(p.dmin);
    for (int t = 0; t < kPTokens; ++t) {
      // bsums are per 16 codes, a min covers 32: neighbours added, as pairs of sub-blocks
      int16_t pairs[8];
      _mm_storeu_si128(reinterpret_cast<__m128i*>(pairs),
                       _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t][b].bsums)),
                                      _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[t][b].bsums + 8))));
      __m256i msum = _mm256_setzero_si256();
      for (int q = 0; q < 4; ++q) {
        int32_t pair;
        std::memcpy(&pair, pairs + 2 * q, 4);
        msum = _mm256_add_epi32(msum, _mm256_madd_epi16(load32(p.mins[q]), _mm256_set1_epi32(pair)));
      }
      const __m256 inner = _mm256_sub_ps(_mm256_mul_ps(d, _mm256_cvtepi32_ps(isum[t])),
                                         _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(msum)));
      acc[t] = _mm256_add_ps(acc[t], _mm256_mul_ps(_mm256_set1_ps(x[t][b].d), inner));
    }
  }
  for (int t = 0; t < kPTokens; ++t) out[t] = acc[t];
}

// Rows [r0, r1) of every token (n_tokens >= 4; matmul_avx2_rowgroup_driver.h).
inline void prefill_q4_k_rowgroups(const KernelArgs& a, int64_t r0, int64_t r1) {
  prefill_row_groups<Q4KRowGroup, block_q8_K>(
      a, r0, r1, a.w->cols / QK_K, interleave_q4_k, tile_q4_k,
      [](const KernelArgs& args, int64_t t) { return token_blocks_k(args, t); });
}

}  // namespace
}  // namespace shardlm::matmul_impl
