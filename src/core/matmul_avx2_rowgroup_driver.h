// The loop both AVX2 row-group prefill kernels share (matmul_avx2_rowgroups.h
// for 32-element blocks, matmul_kquants_avx2_rowgroups.h for K-quants): rows in
// blocks of kPRowBlock, each interleaved once into groups of kPGroupRows
// (≤ 370 KB at 4096 columns: stays in L2), × tiles of kPTokens tokens (their
// activations stay in L1 while every row group of the block passes).
// Included only from AVX2 kernel files; internal linkage (see
// matmul_avx2_common.h).
#pragma once

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

constexpr int kPGroupRows = 8, kPTokens = 4;
constexpr int64_t kPRowBlock = 64;  // a multiple of kPGroupRows

// Rows [r0, r1) of every token. Group: one interleaved block (or
// super-block) of a row group; nb of them per row.
// interleave(m, rb, rend, nb, Group* out): rows [rb, rend) as groups, group
// g's block b at out[g · nb + b]; tile(const Group*, const XBlock* const* x,
// nb, __m256* sums): kTileGroups groups from the one given (the next at
// nb blocks on), lane i of sums[j · kPTokens + t] row i of group j's sum for
// token t; x_of(a, t, slot): token t's activation blocks, for place `slot`
// of the tile (called for slots 0, 1, ... in order). A tile's groups past
// rend read blocks of the buffer no row of this block wrote; their sums are
// dropped.
template <class Group, class XBlock, int kTileGroups = 1, class Interleave, class Tile, class TokenBlocks>
void prefill_row_groups(const KernelArgs& a, int64_t r0, int64_t r1, int64_t nb, Interleave interleave, Tile tile,
                        TokenBlocks x_of) {
  static_assert(kPRowBlock % (kTileGroups * kPGroupRows) == 0);
  const MatrixView& m = *a.w;
  const int64_t n = a.n_tokens;
  // Per thread and reused: a fresh buffer of this size per call would be
  // mapped and faulted in again each time.
  thread_local std::vector<Group> interleaved;
  interleaved.resize(size_t(kPRowBlock / kPGroupRows * nb));
  for (int64_t rb = r0; rb < r1; rb += kPRowBlock) {
    const int64_t rend = std::min(rb + kPRowBlock, r1);
    interleave(m, rb, rend, nb, interleaved.data());
    for (int64_t t = 0; t < n; t += kPTokens) {
      const XBlock* x[kPTokens];
      for (int j = 0; j < kPTokens; ++j) x[j] = x_of(a, std::min(t + j, n - 1), j);
      const int64_t kt = std::min<int64_t>(kPTokens, n - t);
      for (int64_t r = rb, g = 0; r < rend; r += kTileGroups * kPGroupRows, g += kTileGroups) {
        __m256 sums[kTileGroups * kPTokens];
        tile(interleaved.data() + g * nb, x, nb, sums);
        for (int k = 0; k < kTileGroups; ++k) {
          const int64_t kr = std::min<int64_t>(kPGroupRows, rend - r - k * kPGroupRows);
          for (int j = 0; j < kt && kr > 0; ++j) {
            float lanes[kPGroupRows];
            _mm256_storeu_ps(lanes, sums[k * kPTokens + j]);
            std::memcpy(a.y + (t + j) * m.rows + r + k * kPGroupRows, lanes, size_t(kr) * sizeof(float));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
