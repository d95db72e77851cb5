// AVX2 kernels on Panels16 matrices (matmul_panels.cpp's layout) of the
// 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0). Decode and batched
// decode (1-8 tokens) stream each 16-row panel once; prefill (9+ tokens)
// interleaves the panels into the row-group tiles' form
// (matmul_avx2_rowgroups.h). Both run rowgroup_block, so a token's result has
// the same bits alone or in any batch.
//
// Why panels on AVX2: a panel's piece k holds the same 4 bytes of 16 rows
// side by side, so 8 rows' codes for 4 elements are one load (two vector
// ops for Q4_0's nibbles), a maddubs puts each row's products in its own
// lane, and a block's scaling is one convert and two multiply-adds for 8
// rows. Decoding GGUF rows one at a time costs ~13 vector instructions per
// 18-byte Q4_0 block (dot_rows), which kept a thread at ~23 GB/s on Zen 5
// and behind llama.cpp's AVX2 build; this loop issues ~4.
#include <cstring>

#include "core/cpu.h"
#include "core/matmul_avx2_common.h"
#include "core/matmul_avx2_rowgroup_driver.h"
#include "core/matmul_avx2_rowgroups.h"
#include "core/matmul_decode32.h"
#include "core/matmul_kernels.h"
#include "core/matmul_panel_prefetch.h"
#include "core/matmul_panels_avx2.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// A panel block of 16 rows (16 GGUF blocks, matmul_panels_avx2.h), read for
// half h: scales(block, h) gives the rows' block scales and their float
// bias terms (the minimum of Q4_1/Q5_1; Q4_0/Q5_0's offset is an integer),
// codes(block, h, v) what W::codes gives for elements 4v .. 4v + 3 of each
// row (RowGroupBlock::codes).
struct PanelScales {
  __m256 d, bias;
};
template <class W>
struct PanelBlock;

// Byte j of a 16-byte qs piece run (from GGUF byte `qs`) holds element j
// (low nibble) and j + 16 (high).
inline __m256i panel_nibbles(const uint8_t* block, int h, size_t qs, int v) {
  const __m256i piece = panel_piece(block, h, qs + 4 * size_t(v % 4));
  return _mm256_and_si256(v < 4 ? piece : _mm256_srli_epi16(piece, 4), _mm256_set1_epi8(0x0F));
}
// 16 in byte e of each row's dword where bit 4v + e of its qh dword is set
// (Q5_0/Q5_1's fifth bits): the qh byte holding them spread over the dword,
// each byte tested for its own bit.
inline __m256i panel_fifth_bits(const uint8_t* block, int h, size_t qh, int v) {
  const __m256i byte_of_dword = _mm256_setr_epi8(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12, 0, 0, 0, 0, 4, 4, 4,
                                                 4, 8, 8, 8, 8, 12, 12, 12, 12);
  const __m256i spread =
      _mm256_shuffle_epi8(panel_piece(block, h, qh), _mm256_add_epi8(byte_of_dword, _mm256_set1_epi8(char(v / 2))));
  const __m256i bit = _mm256_set1_epi32(v % 2 ? int(0x80402010) : 0x08040201);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit), _mm256_set1_epi8(0x10));
}

template <>
struct PanelBlock<Q4_0W> {
  static PanelScales scales(const uint8_t* block, int h) {
    return {panel_halves(block, h, 0), _mm256_setzero_ps()};  // the offset: kOffsetEights
  }
  static __m256i codes(const uint8_t* block, int h, int v) { return panel_nibbles(block, h, 2, v); }
};

template <>
struct PanelBlock<Q4_1W> {
  static PanelScales scales(const uint8_t* block, int h) {
    const F16Pairs dm = panel_f16_pairs(block, h, 0);
    return {dm.first, dm.second};  // Q4_1W::bias: the minimum
  }
  static __m256i codes(const uint8_t* block, int h, int v) { return panel_nibbles(block, h, 4, v); }
};

template <>
struct PanelBlock<Q5_0W> {
  static PanelScales scales(const uint8_t* block, int h) {
    return {panel_halves(block, h, 0), _mm256_setzero_ps()};  // the offset: kOffsetEights
  }
  static __m256i codes(const uint8_t* block, int h, int v) {
    return _mm256_or_si256(panel_nibbles(block, h, 6, v), panel_fifth_bits(block, h, 2, v));
  }
};

template <>
struct PanelBlock<Q5_1W> {
  static PanelScales scales(const uint8_t* block, int h) { return PanelBlock<Q4_1W>::scales(block, h); }
  static __m256i codes(const uint8_t* block, int h, int v) {
    return _mm256_or_si256(panel_nibbles(block, h, 8, v), panel_fifth_bits(block, h, 4, v));
  }
};

template <>
struct PanelBlock<Q8_0W> {
  static PanelScales scales(const uint8_t* block, int h) { return {panel_halves(block, h, 0), _mm256_setzero_ps()}; }
  static __m256i codes(const uint8_t* block, int h, int v) { return panel_piece(block, h, 2 + 4 * size_t(v)); }
};

template <class W>
constexpr size_t kPanelBlockBytes = kPanelRows * sizeof(typename W::Block);

// The panels at rows[0..S) × T tokens in one pass, block b of each in turn;
// kVnni: rowgroup_block's AVX-VNNI form.
template <class W, int T, int S, bool kVnni>
inline void panels_in_step(const KernelArgs& a, const int64_t* rows, const block_q8_32* const* x,
                           const PanelPrefetch& prefetch) {
  constexpr int H = kHalves<W> ? 2 : 1;
  const MatrixView& m = *a.w;
  const int64_t nb = m.cols / 32;
  const uint8_t* panel[S];
  for (int s = 0; s < S; ++s) panel[s] = m.row(rows[s]);
  __m256 acc[S][2][H][T];
  for (auto& stream : acc)
    for (auto& half : stream)
      for (auto& part : half)
        for (auto& v : part) v = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
#pragma GCC unroll 2
    for (int s = 0; s < S; ++s) {
      const uint8_t* block = panel[s] + size_t(b) * kPanelBlockBytes<W>;
      prefetch.ahead_of(block);
      // Both halves in one call, so that each broadcast of a token's
      // activations serves 16 rows. Zen 3, 4096² in cache, one thread
      // (bench kernels, three rounds, against a half at a time): Q4_0 4
      // tokens 816-822 → 617-621 µs, 8 tokens 1623-1629 → 1235-1237; Q4_1,
      // Q5_0 14-18 % faster from 3 tokens, Q5_1 and Q8_0 6-10 %; one token
      // within noise from memory.
      static_assert(kBroadcastGroups == 2, "a panel block is two groups of 8 rows");
      const PanelScales sc[2] = {PanelBlock<W>::scales(block, 0), PanelBlock<W>::scales(block, 1)};
      const __m256 dw[2] = {sc[0].d, sc[1].d}, bias[2] = {sc[0].bias, sc[1].bias};
      rowgroup_block<W, T, kVnni>([&](int h, int v) { return PanelBlock<W>::codes(block, h, v); }, dw, bias, x, b,
                                  acc[s]);
    }
  }
  for (int s = 0; s < S; ++s)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < T; ++t)
        _mm256_storeu_ps(a.y + t * m.rows + rows[s] + 8 * h,
                         H == 2 ? _mm256_add_ps(acc[s][h][0][t], acc[s][h][H - 1][t]) : acc[s][h][0][t]);
}

// Rows [r0, r1) (whole panels) × T tokens, each panel read once; with S = 2
// as two stretches walked in step (matmul_gemm.h's one_pass: two streams for
// the prefetchers; one token only, where the accumulators of both still fit
// the 16 registers).
template <class W, bool kVnni, int T, int S = 1>
void panel_rows(const KernelArgs& a, int64_t r0, int64_t r1) {
  const block_q8_32* x[T];
  for (int t = 0; t < T; ++t) x[t] = token_blocks(a, t);
  const PanelPrefetch prefetch(kPanelBlockBytes<W>, a.prefetch, a.prefetch_ahead);
  const int64_t per = S > 1 ? (r1 - r0) / kPanelRows / S : 0;  // panels a stretch
  for (int64_t i = 0; i < per; ++i) {
    int64_t rows[S];
    for (int s = 0; s < S; ++s) rows[s] = r0 + (s * per + i) * kPanelRows;
    panels_in_step<W, T, S, kVnni>(a, rows, x, prefetch);
  }
  for (int64_t r = r0 + S * per * kPanelRows; r < r1; r += kPanelRows)
    panels_in_step<W, T, 1, kVnni>(a, &r, x, prefetch);
}

// Rows [rb, rend) as RowGroupBlocks (matmul_avx2_rowgroups.h's
// interleave_rows, from panels): the same codes, scales and bias terms.
template <class W>
void interleave_panels(const MatrixView& m, int64_t rb, int64_t rend, int64_t nb, RowGroupBlock* out) {
  for (int64_t r = rb, g = 0; r < rend; r += kPGroupRows, ++g) {
    const uint8_t* panel = m.row(r / kPanelRows * kPanelRows);
    const int h = int(r % kPanelRows) / kPGroupRows;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* block = panel + size_t(b) * kPanelBlockBytes<W>;
      RowGroupBlock& dst = out[g * nb + b];
      const PanelScales sc = PanelBlock<W>::scales(block, h);
      _mm256_storeu_ps(dst.d, sc.d);
      _mm256_storeu_ps(dst.bias, sc.bias);
      for (int v = 0; v < 8; ++v)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst.codes[v]), PanelBlock<W>::codes(block, h, v));
    }
  }
}

// 1..kPanelChunkTokens tokens.
template <class W, bool kVnni>
void panel_rows_of(const KernelArgs& a, int64_t r0, int64_t r1) {
  switch (a.n_tokens) {
    case 1: return a.streams == 2 ? panel_rows<W, kVnni, 1, 2>(a, r0, r1) : panel_rows<W, kVnni, 1>(a, r0, r1);
    case 2: return panel_rows<W, kVnni, 2>(a, r0, r1);
    case 3: return panel_rows<W, kVnni, 3>(a, r0, r1);
    default: return panel_rows<W, kVnni, kPanelChunkTokens>(a, r0, r1);
  }
}

template <class W, bool kVnni>
void panels(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens <= kPanelChunkTokens) return panel_rows_of<W, kVnni>(a, r0, r1);
  if (a.n_tokens <= kPanelOnePassTokens)
    return panel_token_chunks(a, r0, r1, [](const KernelArgs& chunk, int64_t c0, int64_t c1, int64_t) {
      panel_rows_of<W, kVnni>(chunk, c0, c1);
    });
  return prefill_row_groups<RowGroupBlock, block_q8_32, kBroadcastGroups>(
      a, r0, r1, a.w->cols / 32, interleave_panels<W>, tile32<W, kVnni>,
      [](const KernelArgs& args, int64_t t, int) { return token_blocks(args, t); });
}

}  // namespace

Kernel avx2_panel_kernel(DType type, bool vnni) {
  switch (type) {
    case DType::Q4_0: return vnni ? panels<Q4_0W, true> : panels<Q4_0W, false>;
    case DType::Q4_1: return vnni ? panels<Q4_1W, true> : panels<Q4_1W, false>;
    case DType::Q5_0: return vnni ? panels<Q5_0W, true> : panels<Q5_0W, false>;
    case DType::Q5_1: return vnni ? panels<Q5_1W, true> : panels<Q5_1W, false>;
    case DType::Q8_0: return vnni ? panels<Q8_0W, true> : panels<Q8_0W, false>;
    default: return avx2_kquant_panel_kernel(type);
  }
}

Kernel avx2_panel_kernel(DType type) { return avx2_panel_kernel(type, avx_vnni_active()); }

}  // namespace shardlm::matmul_impl
