// How the AVX2 panel kernels (matmul_panels_avx2.cpp,
// matmul_kquant_panels_avx2.cpp) read a Panels16 block (matmul_panels.cpp's
// layout): the piece at byte o of the GGUF block is stored for the 16 rows
// side by side at kPanelRows · o, and half h of the group is rows
// 8h .. 8h + 7, so a piece of a half is one load whose dword (or f16) lanes
// are its 8 rows. Included only from AVX2 kernel files; internal linkage
// (see matmul_avx2_common.h).
#pragma once

#include <immintrin.h>

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

}  // namespace
}  // namespace shardlm::matmul_impl
