// How the AVX2 panel kernels (matmul_panels_avx2.cpp,
// matmul_kquant_panels_avx2.cpp) read a Panels16 block (matmul_panels.cpp's
// layout): the piece at byte o of the GGUF block is stored for the 16 rows
// side by side at kPanelRows · o, and half h of the group is rows
// 8h .. 8h + 7, so a piece of a half is one load whose dword (or f16) lanes
// are its 8 rows. Included only from AVX2 kernel files; internal linkage
// (see matmul_avx2_common.h).
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

// GGUF bytes [byte, byte + 4) of the half's 8 rows, a dword a row.
inline __m256i panel_piece(const uint8_t* block, int h, size_t byte) {
  return avx2::load32(block + kPanelRows * byte + 32 * h);
}

// The f16 at GGUF byte `byte` (a 2-byte piece) of the half's 8 rows, as f32.
inline __m256 panel_halves(const uint8_t* block, int h, size_t byte) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + kPanelRows * byte + 16 * h)));
}

// A piece of two f16s a row (d and the minimum of Q4_1/Q5_1, d and dmin of
// Q4_K/Q5_K), as the half's 8 first and 8 second values.
struct F16Pairs {
  __m256 first, second;
};
inline F16Pairs panel_f16_pairs(const uint8_t* block, int h, size_t byte) {
  const __m256i dd = panel_piece(block, h, byte);
  const __m256i halves = _mm256_permute4x64_epi64(
      _mm256_packus_epi32(_mm256_and_si256(dd, _mm256_set1_epi32(0xFFFF)), _mm256_srli_epi32(dd, 16)), 0xD8);
  return {_mm256_cvtph_ps(_mm256_castsi256_si128(halves)), _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1))};
}

// Tokens a panel kernel's one pass over a panel takes at most: its
// accumulators, two halves × tokens, leave registers for the codes up to this.
constexpr int64_t kPanelChunkTokens = 4;

// Batched decode beyond kPanelChunkTokens tokens: each panel in chunks of
// tokens, rows_of(chunk, r0, r1, the chunk's first token) one after another,
// so that it comes from memory once and from L1 for the chunks after the
// first. The prefill tiles
// first wrote and read back every weight interleaved and padded 5-7 tokens
// to 8: on the AMX Xeon under ISA=avx2 they took Q4_0 at 4 tokens 1.55x as
// long, Q8_0 at 8 1.41x (docs/BENCHMARKS.md, twenty-second session).
template <class RowsOf>
void panel_token_chunks(const KernelArgs& a, int64_t r0, int64_t r1, RowsOf rows_of) {
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    for (int64_t t = 0; t < a.n_tokens; t += kPanelChunkTokens) {
      KernelArgs chunk = a;
      chunk.x = static_cast<const uint8_t*>(a.x) + a.x_stride * size_t(t);
      chunk.y = a.y + t * a.w->rows;
      chunk.n_tokens = std::min(kPanelChunkTokens, a.n_tokens - t);
      rows_of(chunk, r, std::min(r1, r + kPanelRows), t);
    }
  }
}

}  // namespace
}  // namespace shardlm::matmul_impl
