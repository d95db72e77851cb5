// Weight panels and token tiles shared by the prefill / batched-decode
// kernels (n_tokens >= kGemmMinTokens): matmul_gemm_avx512.cpp (VNNI) and
// matmul_amx.cpp (AMX). Only include from files compiled with AVX-512 VNNI
// flags; everything is in an anonymous namespace so each includer keeps its
// own copy (see matmul_avx512.cpp on internal linkage).
//
// One 32-bit lane per weight row: 16 rows of a weight block are unpacked once
// into a panel where vector g holds, for every row, the 4 unsigned codes of
// elements 4g..4g+3. vpdpbusd multiplies that vector with one token's 4
// activation codes broadcast from memory (AMX reads the same panel as its B
// tile), so a block of 16 rows × 1 token costs 8 vpdpbusd plus the per-block
// scaling. The panel of a row group covers the whole row and is reused by
// every token of a chunk whose activations fit in L2, so weights are read
// from memory about once per chunk.
//
// The panel is filled from one of two sources. GGUF rows (GatheredGroup):
// 16-byte loads of four rows transposed in registers, gathers for scales and
// partial groups, so any row stride (tensor-parallel views) works; the next
// row group is prefetched while one is unpacked. That unpacking costs per
// weight whatever the token count, about as much as a one-token decode pass.
// Weights repacked at load into WeightLayout::Panels16 (PanelGroup) already
// hold each dword as a vector of 16 rows: unpacking is a load and a nibble
// mask, the group is one sequential stream, and the same one_pass serves
// decode (1-3 tokens) and batched decode.
//
// The pieces: matmul_gemm_common.h (the two sources and the lane helpers),
// matmul_gemm_blocks32.h and matmul_gemm_kquants.h (the block types), and
// here the driver that runs them over row groups and token tiles.
//
// Every (row, token) result is computed by the same instruction sequence
// whatever tile, chunk or thread it falls in (AMX and vpdpbusd produce the
// same exact integer sums), so a token's result does not depend on the other
// tokens of the batch nor on the thread count.
#pragma once

#include "core/matmul_gemm_blocks32.h"
#include "core/matmul_gemm_common.h"
#include "core/matmul_gemm_kquants.h"

namespace shardlm::matmul_impl {
namespace {

// Activations of one token chunk (re-read for every row group) should stay in
// L2 next to the panel.
constexpr size_t kChunkActBytes = 768u << 10;

// ---- driver -----------------------------------------------------------------

template <class F, int T>
void tiles(const typename F::Panel* panel, int64_t nb, const KernelArgs& a, int64_t r, int valid, int64_t t0,
           int64_t t1) {
  const auto* x = static_cast<const uint8_t*>(a.x);
  const __mmask16 mask = __mmask16((1u << valid) - 1);
  for (int64_t t = t0; t + T <= t1; t += T) {
    __m512 acc[T];
    F::template tile<T>(panel, nb, x + a.x_stride * size_t(t), a.x_stride, acc);
    for (int i = 0; i < T; ++i) _mm512_mask_storeu_ps(a.y + (t + i) * a.w->rows + r, mask, acc[i]);
  }
}

// Tokens [t0, t1) (a multiple of F::kPairTokens) of row groups r (16 rows)
// and r + 16 (valid2 rows) in tiles of both, panel the first's and
// panel + nb the second's.
template <class F>
void pair_tiles(const typename F::Panel* panel, int64_t nb, const KernelArgs& a, int64_t r, int valid2, int64_t t0,
                int64_t t1) {
  constexpr int T = F::kPairTokens;
  const auto* x = static_cast<const uint8_t*>(a.x);
  const __mmask16 mask2 = __mmask16((1u << valid2) - 1);
  for (int64_t t = t0; t < t1; t += T) {
    __m512 acc[2 * T];
    F::template tile_pair<T>(panel, panel + nb, nb, x + a.x_stride * size_t(t), a.x_stride, acc);
    for (int i = 0; i < T; ++i) {
      _mm512_storeu_ps(a.y + (t + i) * a.w->rows + r, acc[i]);
      _mm512_mask_storeu_ps(a.y + (t + i) * a.w->rows + r + kRows, mask2, acc[T + i]);
    }
  }
}

// Tokens [t0, t1) in tiles of F::kTokens, the rest in halving tiles.
template <class F, int T = F::kTokens>
void token_tiles(const typename F::Panel* panel, int64_t nb, const KernelArgs& a, int64_t r, int valid, int64_t t0,
                 int64_t t1) {
  tiles<F, T>(panel, nb, a, r, valid, t0, t1);
  if constexpr (T > 1) token_tiles<F, T / 2>(panel, nb, a, r, valid, t1 - (t1 - t0) % T, t1);
}

// S row groups from rows[0..S) (`valid` rows each) × T tokens in one pass,
// block b of each group in turn, each block multiplied as soon as it is
// unpacked (no panel of the whole row to write and read back: with so few
// tokens nothing else would reuse it). Two groups in step from 4 tokens
// multiply as a pair where F has block_pair (one activation broadcast for
// both groups' products, twice the chains): on the Xeon with AMX, 8 tokens
// of Q4_0 in L2 15 % faster, 4 tokens 24 %, and 1B Q4_0 with 8 sequences
// decoded 10 % faster. The same per-block arithmetic as the tiles, so the
// same bits.
template <class F, class Src, int T, int S>
SHARDLM_GEMM_INLINE void groups_in_step(const KernelArgs& a, const RowGroups<Src>& groups, const int64_t* rows,
                                        int valid) {
  const MatrixView& m = *a.w;
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int64_t nb = F::panels(m.cols);
  const auto src = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::array<Src, S>{groups.at(rows[I], valid)...};
  }(std::make_index_sequence<S>());
  typename F::Panel panel;
  __m512 acc[S][T];
  for (auto& group_acc : acc)
    for (auto& v : group_acc) v = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    if constexpr (S == 2 && T >= kGemmMinTokens && requires { &F::template block_pair<T>; }) {
      typename F::Panel second;
      F::unpack_block(src[0], b, panel);
      F::unpack_block(src[1], b, second);
      F::template block_pair<T>(panel, second, b, x, a.x_stride, acc[0], acc[1]);
      continue;
    }
    for (int g = 0; g < S; ++g) {
      if constexpr (requires { F::template block_in_place<T>(src[g], b, panel, x, a.x_stride, acc[g]); }) {
        F::template block_in_place<T>(src[g], b, panel, x, a.x_stride, acc[g]);
      } else {
        F::unpack_block(src[g], b, panel);
        F::template block<T>(panel, b, x, a.x_stride, acc[g]);
      }
    }
  }
  for (int g = 0; g < S; ++g)
    for (int t = 0; t < T; ++t)
      _mm512_mask_storeu_ps(a.y + t * m.rows + rows[g], __mmask16((1u << valid) - 1), acc[g][t]);
}

// A batch of at most F::kTokens tokens, each row group read once. With S > 1
// the rows are S stretches of whole groups walked in step (the groups left
// over one at a time): S streams of the weights instead of one, which the
// core's prefetchers follow faster on some CPUs (a Xeon with AMX: one token
// of a 400 MiB Q4_0 matrix 15.6 -> 17.5 GB/s with two; PanelStreaming times
// it).
template <class F, class Src, int T, int S = 1>
void one_pass(const KernelArgs& a, int64_t r0, int64_t r1) {
  const RowGroups<Src> groups(a);
  const int64_t per = S > 1 ? (r1 - r0) / kRows / S : 0;  // groups a stretch
  for (int64_t i = 0; i < per; ++i) {
    int64_t rows[S];
    for (int g = 0; g < S; ++g) rows[g] = r0 + (g * per + i) * kRows;
    groups_in_step<F, Src, T, S>(a, groups, rows, kRows);
  }
  for (int64_t r = r0 + S * per * kRows; r < r1; r += kRows)
    groups_in_step<F, Src, T, 1>(a, groups, &r, int(std::min<int64_t>(kRows, r1 - r)));
}

// one_pass in the a.streams streams (panels of a 32-element type:
// matmul_prefetch_plan.cpp's has_streams_choice).
template <class F, class Src, int T>
void one_pass_streams(const KernelArgs& a, int64_t r0, int64_t r1) {
  if constexpr (std::is_same_v<Src, PanelGroup> && !std::is_same_v<typename F::Panel, PanelK>)
    if (a.streams == 2) return one_pass<F, Src, T, 2>(a, r0, r1);
  one_pass<F, Src, T>(a, r0, r1);
}

// one_pass for a.n_tokens (T..kPanelOnePassTokens), with the activation
// loads a.activations and the codes a.kquant_codes name where F has that
// choice.
template <class F, class Src, int T = 1>
void one_pass_of(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == T) {
    if constexpr (T >= 2 && requires { typename F::Broadcasting; })
      if (a.activations == ActivationLoads::kBroadcast)
        return one_pass_streams<typename F::Broadcasting, Src, T>(a, r0, r1);
    if constexpr (std::is_same_v<Src, PanelGroup> && requires { typename F::InPlace; })
      if (a.kquant_codes == KQuantCodes::kInPlace) return one_pass_streams<typename F::InPlace, Src, T>(a, r0, r1);
    return one_pass_streams<F, Src, T>(a, r0, r1);
  }
  if constexpr (T < kPanelOnePassTokens) one_pass_of<F, Src, T + 1>(a, r0, r1);
}

// A batch of T tokens (kGemmMinTokens <= T < F::kTokens) with F's batch
// tile, one row group at a time.
template <class F, class Src, int T>
void batch_tile_rows(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& m = *a.w;
  const auto* x = static_cast<const uint8_t*>(a.x);
  const int64_t nb = F::panels(m.cols);
  const RowGroups<Src> groups(a);
  for (int64_t r = r0; r < r1; r += kRows) {
    const int valid = int(std::min<int64_t>(kRows, r1 - r));
    __m512 acc[T];
    F::template small_batch_tile<T>(groups.at(r, valid), nb, x, a.x_stride, acc);
    for (int t = 0; t < T; ++t) _mm512_mask_storeu_ps(a.y + t * m.rows + r, __mmask16((1u << valid) - 1), acc[t]);
  }
}
template <class F, class Src, int T = F::kTokens - 1>
void batch_tile(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens == T) return batch_tile_rows<F, Src, T>(a, r0, r1);
  if constexpr (T > kGemmMinTokens) batch_tile<F, Src, T - 1>(a, r0, r1);
}

// Row groups of 16 from r0 (a multiple of kRowAlign), tokens in chunks.
// Src: GatheredGroup (GGUF rows, 4+ tokens) or PanelGroup (Panels16, any
// count: 1-3 tokens, decode, take one_pass too, so a token's result is the
// same bits in every batch).
template <class F, class Src = GatheredGroup>
void gemm(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& m = *a.w;
  if (std::is_same_v<Src, GatheredGroup> && m.row_stride > size_t(INT_MAX) / kRows) {  // gather offsets are int32
    Kernel lower = avx2_kernel(m.type);
    (lower ? lower : avx2_kquant_kernel(m.type))(a, r0, r1);
    return;
  }
  if constexpr (!F::kSmallBatchTile) {
    if (a.n_tokens <= kPanelOnePassTokens) return one_pass_of<F, Src>(a, r0, r1);
  }
  // Batched decode (fewer tokens than a full tile): a kernel whose one tile
  // takes any such count (AMX: tile rows = tokens) does all of them in one
  // pass per row group, so each unpacked panel is used once for every token.
  if constexpr (F::kSmallBatchTile) {
    if (a.n_tokens >= kGemmMinTokens && a.n_tokens < F::kTokens) {
      [[maybe_unused]] const typename F::Session session(a.n_tokens);  // AMX: tile configuration for this thread
      return batch_tile<F, Src>(a, r0, r1);
    }
  }
  const int64_t nb = F::panels(m.cols);
  thread_local std::vector<typename F::Panel> panel;
  panel.resize(size_t(F::kPairTokens > 0 ? 2 * nb : nb));  // pair tiles: two row groups' panels
  [[maybe_unused]] const typename F::Session session(a.n_tokens);  // AMX: tile configuration for this thread
  const int64_t chunk = std::max<int64_t>(F::kTokens, int64_t(kChunkActBytes / a.x_stride) / F::kTokens * F::kTokens);
  const RowGroups<Src> groups(a);
  for (int64_t t0 = 0; t0 < a.n_tokens; t0 += chunk) {
    const int64_t t1 = std::min(a.n_tokens, t0 + chunk);
    for (int64_t r = r0; r < r1; r += kRows) {
      const int valid = int(std::min<int64_t>(kRows, r1 - r));
      F::unpack(groups.at(r, valid), m.cols, panel.data());
      if constexpr (F::kPairTokens > 0) {
        if (r + kRows < r1) {  // two row groups: pair tiles
          const int valid2 = int(std::min<int64_t>(kRows, r1 - r - kRows));
          F::unpack(groups.at(r + kRows, valid2), m.cols, panel.data() + nb);
          const int64_t t_pairs = t1 - (t1 - t0) % F::kPairTokens;
          pair_tiles<F>(panel.data(), nb, a, r, valid2, t0, t_pairs);
          token_tiles<F>(panel.data(), nb, a, r, valid, t_pairs, t1);
          token_tiles<F>(panel.data() + nb, nb, a, r + kRows, valid2, t_pairs, t1);
          r += kRows;
          continue;
        }
      }
      token_tiles<F>(panel.data(), nb, a, r, valid, t0, t1);
    }
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
