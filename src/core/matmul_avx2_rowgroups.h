// AVX2 prefill (>= 4 tokens) for the 32-element block types × Q8_32
// activations on rows interleaved 8 at a time. Included only from
// matmul_avx2.cpp (compiled with -mavx2 -mfma -mf16c); internal linkage (see
// matmul_avx2_common.h).
#pragma once

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/matmul_avx2_common.h"
#include "core/matmul_avx2_rowgroup_driver.h"
#include "core/matmul_decode32.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// A block of kPRowBlock rows is first unpacked once into codes interleaved 8
// rows at a time (RowGroupBlock): vector v of a block holds elements
// 4v..4v+3 of each of the 8 rows in its dword lanes. Multiplied with the
// token's dword v broadcast to every lane, maddubs then gives each row's
// products in its own lane, so after the 8 vectors of a block lane i holds
// row i's exact integer sum: no horizontal folding, and the per-block f32
// scaling is one convert and one or two FMAs for 8 rows. Each unpacked
// vector serves kPTokens tokens, each broadcast the rows of
// kBroadcastGroups groups; unpacking is paid once per row block instead of
// once per token tile.
// Every output element takes the same lane arithmetic whatever tile, thread
// or batch computes it: tails are padded by repeating the last row/token.
struct RowGroupBlock {
  uint8_t codes[8][32];       // [v][4·row + e]: element 4v + e of the row
  float d[kPGroupRows];       // the rows' block scales
  float bias[kPGroupRows];    // their minimum term (W::bias; offsets are integer)
};

// Q4_1/Q5_1 sum each half block (elements 0-15, 16-31) into an f32
// accumulator of its own, the minimum term into the first, and add the two
// at the end: the order of f32 additions of the folded tiles they ran on
// before. Their minimum term nearly cancels the code term, and the kq-mixed
// golden test (1e-4 of llama.cpp's logits) holds with that order (the
// one-accumulator order moved its logits by 0.016).
template <class W>
constexpr bool kHalves = std::is_same_v<W, Q4_1W> || std::is_same_v<W, Q5_1W>;

// How many maddubs results (pairs of code · activation, |activation| ≤ 128)
// int16 lanes can add before they could overflow: 8 for 4-bit codes, 4 for
// 5-bit, 1 for Q8_0's |q| ≤ 128; a run stays in one half block with kHalves.
template <class W>
constexpr int kSum16 = W::kSigned ? 1 : std::is_same_v<W, Q5_0W> || kHalves<W> ? 4 : 8;

// Rows [rb, rend) as groups of 8 (the last row repeated past rend), group g's
// block b at out[g · nb + b].
template <class W>
void interleave_rows(const MatrixView& m, int64_t rb, int64_t rend, int64_t nb, RowGroupBlock* out) {
  for (int64_t r = rb, g = 0; r < rend; r += kPGroupRows, ++g) {
    const typename W::Block* w[kPGroupRows];
    for (int i = 0; i < kPGroupRows; ++i)
      w[i] = reinterpret_cast<const typename W::Block*>(m.row(std::min<int64_t>(r + i, rend - 1)));
    for (int64_t b = 0; b < nb; ++b) {
      RowGroupBlock& dst = out[g * nb + b];
      __m256i codes[kPGroupRows], by_v[8];
      for (int i = 0; i < kPGroupRows; ++i) {
        codes[i] = W::codes(w[i][b]);
        dst.d[i] = half_to_float(w[i][b].d);
        dst.bias[i] = W::kOffsetEights ? 0.0f : W::bias(w[i][b], dst.d[i]);  // offsets: rowgroup_block
      }
      transpose8x8_dwords(codes, by_v);
      for (int v = 0; v < 8; ++v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.codes[v]), by_v[v]);
    }
  }
}

// Groups of 8 interleaved rows that rowgroup_block takes at once: each
// broadcast of a token's activations serves all of them. At a few tokens the
// loop is bound by how many instructions it issues, and with one group the
// broadcast was one of the ~5 a maddubs took (docs/BENCHMARKS.md, fifty-first
// session).
constexpr int kBroadcastGroups = 2;

// One block of kBroadcastGroups groups of 8 interleaved rows × T tokens,
// added to acc[r][h][t] (h: the half block of kHalves types). codes(r, v) is
// group r's vector v (element 4v..4v+3 of each row in its dword lanes);
// dw[r] and bias[r] hold the rows' scales and float bias terms (the minimum;
// unused for offset types, whose offset starts the integer sum). Every AVX2
// kernel on interleaved rows runs this (the prefill tiles below, the panel
// decode of matmul_panels_avx2.cpp), so a row's result has the same bits
// whichever of them computes it.
//
// kVnni: the products summed by AVX-VNNI's vpdpbusd straight into the int32
// lanes, one instruction a vector and token where maddubs, an int16 add and
// (every kSum16 vectors) a madd and an int32 add took ~2.3. Neither sum can
// round or saturate (the bounds of kSum16), so the int32 sums, and every bit
// after them, are the same.
template <class W, int T, bool kVnni, class Codes>
inline void rowgroup_block(const Codes& codes, const __m256 (&dw)[kBroadcastGroups],
                           const __m256 (&bias)[kBroadcastGroups], const block_q8_32* const* x, int64_t b,
                           __m256 (&acc)[kBroadcastGroups][kHalves<W> ? 2 : 1][T]) {
  constexpr int R = kBroadcastGroups;
  constexpr int S = kSum16<W>, kHalfVectors = kHalves<W> ? 4 : 8;
  const __m256i ones = _mm256_set1_epi16(1);
  // Q4_0/Q5_0 start each block's integer sum from −offset·Σa: exact, and an
  // add where the float bias term took a multiply-add on the multiply pipes
  // (which bound this loop from 4 tokens) and a broadcast per token.
  constexpr int O = W::kOffsetEights;
  auto offset_sum = [&](int t) { return _mm256_set1_epi32(O * x[t][b].minus8_sum); };
  __m256i s16[R][T], s32[R][T];
#pragma GCC unroll 8
  for (int v = 0; v < 8; ++v) {
    __m256i q[R], uq[R];
    for (int r = 0; r < R; ++r) {
      q[r] = codes(r, v);
      uq[r] = W::kSigned ? _mm256_abs_epi8(q[r]) : q[r];  // Q8_0: |q| against sign(q)·a
    }
#pragma GCC unroll 4
    for (int t = 0; t < T; ++t) {
      int32_t a4;
      std::memcpy(&a4, x[t][b].qs + 4 * v, 4);
      const __m256i act = _mm256_set1_epi32(a4);
      for (int r = 0; r < R; ++r) {
        const __m256i signed_act = W::kSigned ? _mm256_sign_epi8(act, q[r]) : act;
        if constexpr (kVnni) {
          const __m256i start = O ? offset_sum(t) : _mm256_setzero_si256();
          s32[r][t] = dpbusd_vex(v % kHalfVectors == 0 ? start : s32[r][t], uq[r], signed_act);
        } else {
          const __m256i prod = _mm256_maddubs_epi16(uq[r], signed_act);
          s16[r][t] = v % S == 0 ? prod : in_order(_mm256_add_epi16(s16[r][t], prod));
          if (v % S == S - 1) {
            const __m256i wide = _mm256_madd_epi16(s16[r][t], ones);
            const __m256i first = O ? _mm256_add_epi32(wide, offset_sum(t)) : wide;
            s32[r][t] = v % kHalfVectors == S - 1 ? first : in_order(_mm256_add_epi32(s32[r][t], wide));
          }
        }
      }
    }
    if (v % kHalfVectors == kHalfVectors - 1) {
      const int h = v / kHalfVectors;
#pragma GCC unroll 4
      for (int t = 0; t < T; ++t) {
        const __m256 dx = _mm256_set1_ps(x[t][b].d);
        for (int r = 0; r < R; ++r) {
          acc[r][h][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s32[r][t]), _mm256_mul_ps(dw[r], dx), acc[r][h][t]);
          if (W::kBias && !O && h == 0)
            acc[r][0][t] = _mm256_fmadd_ps(bias[r], _mm256_set1_ps(W::act_sum(x[t][b])), acc[r][0][t]);
        }
      }
    }
  }
}

// kBroadcastGroups groups of 8 interleaved rows (each nb blocks after the
// one before) × kPTokens tokens over nb blocks: out[kPTokens · j + t] lane i
// is group j's row i's sum for token t.
template <class W, bool kVnni = false>
void tile32(const RowGroupBlock* wb, const block_q8_32* const* x, int64_t nb, __m256* out) {
  constexpr int H = kHalves<W> ? 2 : 1, R = kBroadcastGroups;
  __m256 acc[R][H][kPTokens];
  for (auto& group : acc)
    for (auto& half : group)
      for (auto& v : half) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const RowGroupBlock* p[R];
    __m256 dw[R], bias[R];
    for (int r = 0; r < R; ++r) {
      p[r] = &wb[r * nb + b];
      dw[r] = _mm256_loadu_ps(p[r]->d);
      bias[r] = _mm256_loadu_ps(p[r]->bias);
    }
    rowgroup_block<W, kPTokens, kVnni>([&](int r, int v) { return load32(p[r]->codes[v]); }, dw, bias, x, b, acc);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < kPTokens; ++t)
      out[r * kPTokens + t] = H == 2 ? _mm256_add_ps(acc[r][0][t], acc[r][H - 1][t]) : acc[r][0][t];
}

// Rows [r0, r1) of every token (matmul_avx2_rowgroup_driver.h).
template <class W>
void prefill_rowgroups(const KernelArgs& a, int64_t r0, int64_t r1) {
  prefill_row_groups<RowGroupBlock, block_q8_32, kBroadcastGroups>(
      a, r0, r1, a.w->cols / 32, interleave_rows<W>, tile32<W>,
      [](const KernelArgs& args, int64_t t, int) { return token_blocks(args, t); });
}

}  // namespace
}  // namespace shardlm::matmul_impl
