// WeightLayout::Panels16 (matmul.h): repacking at load, the way back, and the
// scalar kernel on panels (unpacks each group to rows and runs the reference).
// The fast kernels that read panels are the prefill / batched ones of
// matmul_gemm.h, which take a panel source instead of gathering rows.
#include <fmt/format.h>

#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/matmul_kernels.h"

namespace shardlm {
namespace matmul_impl {
namespace {

// The types whose blocks are whole dwords plus at most one 2-byte piece (an
// f16 scale): at the block's start for the 32-element types, at its end for
// Q6_K (Q4_K and Q5_K are whole dwords).
bool has_panel_layout(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0:
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K: return true;
    default: return false;
  }
}

// The piece of a block holding byte `byte`: [start, start + size).
struct Piece {
  size_t start, size;
};
Piece piece_at(DType type, size_t byte) {
  const size_t odd = panel_odd_piece(type);
  if (odd != kNoOddPiece && byte >= odd && byte < odd + 2) return {odd, 2};
  const size_t shift = odd == 0 ? 2 : 0;  // dwords start after a leading 2-byte piece
  return {byte - (byte - shift) % 4, 4};
}

// A piece starting at byte o of the block is stored for all 16 rows at 16·o
// of the group's panel block, row i's copy at 16·o + size·i: consecutive
// pieces tile the panel block as they tile the GGUF block.
size_t panel_offset(Piece piece, int64_t i, size_t byte) {
  return kPanelRows * piece.start + piece.size * size_t(i) + (byte - piece.start);
}

void check_panels(const MatrixView& w) {
  if (!has_panel_layout(w.type) || w.rows % kPanelRows != 0 || w.row_stride != row_bytes(w.type, w.cols))
    throw Error(fmt::format("matmul: {} matrix {}x{} cannot be stored as 16-row panels", dtype_name(w.type), w.rows,
                            w.cols));
}

// Calls copy(offset in the group's rows, offset in its panels, bytes) for
// every piece of a group's blocks, in the panels' order. The pieces of a
// block are worked out once, not per piece and row: a model has hundreds of
// millions of pieces.
template <class Copy>
void for_each_piece(DType type, int64_t cols, Copy copy) {
  const size_t bb = traits(type).block_bytes, row = row_bytes(type, cols);
  std::vector<Piece> pieces;
  for (size_t byte = 0; byte < bb; byte += pieces.back().size) pieces.push_back(piece_at(type, byte));
  for (int64_t b = 0; b < cols / traits(type).block_elems; ++b) {
    const size_t in_rows = size_t(b) * bb, in_panels = size_t(b) * kPanelRows * bb;
    for (const Piece& piece : pieces)
      for (int64_t i = 0; i < kPanelRows; ++i)
        copy(size_t(i) * row + in_rows + piece.start, in_panels + panel_offset(piece, i, piece.start), piece.size);
  }
}

// memcpy of a piece with the two sizes as constants: a libc call per piece
// (variable size) was most of the load time of a repacked model.
void copy_piece(uint8_t* to, const uint8_t* from, size_t n) {
  if (n == 4) {
    std::memcpy(to, from, 4);
  } else {
    std::memcpy(to, from, 2);
  }
}

void scalar_panels(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& w = *a.w;
  const size_t row = row_bytes(w.type, w.cols);
  std::vector<uint8_t> rows(kPanelRows * row);
  std::vector<float> y(size_t(a.n_tokens * kPanelRows));
  const MatrixView group{w.type, rows.data(), kPanelRows, w.cols, row};
  KernelArgs ga = a;
  ga.w = &group;
  ga.y = y.data();
  for (int64_t r = r0; r < r1; r += kPanelRows) {
    unpack_panel_group(w, r / kPanelRows, rows.data());
    scalar_kernel(w.type)(ga, 0, kPanelRows);
    for (int64_t t = 0; t < a.n_tokens; ++t)
      std::memcpy(a.y + t * w.rows + r, y.data() + t * kPanelRows, kPanelRows * sizeof(float));
  }
}

}  // namespace

Kernel scalar_panel_kernel(DType type) { return has_panel_layout(type) ? scalar_panels : nullptr; }

size_t panel_odd_piece(DType type) { return panel_odd_piece(traits(type).block_bytes, traits(type).block_elems); }

}  // namespace matmul_impl

using namespace matmul_impl;

bool panels_pay(const MatrixView& w) {
  return w.layout == WeightLayout::Rows && has_panel_layout(w.type) && w.rows > 0 && w.rows % kPanelRows == 0 &&
         w.row_stride == row_bytes(w.type, w.cols) && panel_isa(active_isa(), w.type, 1) != Isa::Scalar;
}

void repack_panels(const MatrixView& w, uint8_t* out) {
  check_panels(w);
  for (int64_t g = 0; g < w.rows / kPanelRows; ++g) {
    const uint8_t* rows = w.row(g * kPanelRows);
    uint8_t* panels = out + size_t(g) * kPanelRows * w.row_stride;
    for_each_piece(w.type, w.cols,
                   [&](size_t at_row, size_t at_panel, size_t n) { copy_piece(panels + at_panel, rows + at_row, n); });
  }
}

void unpack_panel_group(const MatrixView& w, int64_t g, uint8_t* out) {
  check_panels(w);
  const uint8_t* panels = w.row(g * kPanelRows);
  for_each_piece(w.type, w.cols,
                 [&](size_t at_row, size_t at_panel, size_t n) { copy_piece(out + at_row, panels + at_panel, n); });
}

void read_panel_row(const MatrixView& w, int64_t r, uint8_t* out) {
  check_panels(w);
  if (r < 0 || r >= w.rows) throw Error(fmt::format("matmul: row {} of a {}-row matrix", r, w.rows));
  const uint8_t* panels = w.row(r / kPanelRows * kPanelRows);
  const size_t row = row_bytes(w.type, w.cols), first = size_t(r % kPanelRows) * row;
  for_each_piece(w.type, w.cols, [&](size_t at_row, size_t at_panel, size_t n) {
    if (at_row >= first && at_row < first + row) copy_piece(out + (at_row - first), panels + at_panel, n);
  });
}

}  // namespace shardlm
