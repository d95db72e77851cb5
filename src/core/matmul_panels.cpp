// WeightLayout::Panels16 (matmul.h): repacking at load, the way back, and the
// scalar kernel on panels (unpacks each group to rows and runs the reference).
// The fast kernels that read panels are the prefill / batched ones of
// matmul_gemm.h, which take a panel source instead of gathering rows.
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/matmul_kernels.h"

namespace shardlm {
namespace matmul_impl {
namespace {

constexpr int64_t kGroupRows = 16;

// The 32-element block types: a 2-byte head (the f16 scale) when the block
// is 2 bytes past a multiple of 4, then whole dwords.
bool has_panel_layout(DType type) {
  switch (type) {
    case DType::Q4_0:
    case DType::Q4_1:
    case DType::Q5_0:
    case DType::Q5_1:
    case DType::Q8_0: return true;
    default: return false;
  }
}

size_t head_bytes(DType type) { return traits(type).block_bytes % 4 == 2 ? 2 : 0; }

// Byte `byte` of block b of row i within a group's panel block.
size_t panel_offset(size_t head, int64_t i, size_t byte) {
  if (byte < head) return size_t(i) * head + byte;
  const size_t k = (byte - head) / 4;
  return kGroupRows * head + 64 * k + 4 * size_t(i) + (byte - head) % 4;
}

void check_panels(const MatrixView& w) {
  if (!has_panel_layout(w.type) || w.rows % kGroupRows != 0 || w.row_stride != row_bytes(w.type, w.cols))
    throw Error("matmul: " + std::string(dtype_name(w.type)) + " matrix " + std::to_string(w.rows) + "x" +
                std::to_string(w.cols) + " cannot be stored as 16-row panels");
}

// Calls piece(offset in the group's rows, offset in its panels, bytes) for
// every head and dword of a group's blocks.
template <class Piece>
void for_each_piece(DType type, int64_t cols, Piece piece) {
  const size_t bb = traits(type).block_bytes, head = head_bytes(type), row = row_bytes(type, cols);
  for (int64_t b = 0; b < cols / traits(type).block_elems; ++b)
    for (int64_t i = 0; i < kGroupRows; ++i)
      for (size_t byte = 0; byte < bb; byte += byte < head ? head : 4)
        piece(size_t(i) * row + size_t(b) * bb + byte, size_t(b) * kGroupRows * bb + panel_offset(head, i, byte),
              byte < head ? head : 4);
}

void scalar_panels(const KernelArgs& a, int64_t r0, int64_t r1) {
  const MatrixView& w = *a.w;
  const size_t row = row_bytes(w.type, w.cols);
  std::vector<uint8_t> rows(kGroupRows * row);
  std::vector<float> y(size_t(a.n_tokens * kGroupRows));
  const MatrixView group{w.type, rows.data(), kGroupRows, w.cols, row};
  KernelArgs ga = a;
  ga.w = &group;
  ga.y = y.data();
  for (int64_t r = r0; r < r1; r += kGroupRows) {
    unpack_panel_group(w, r / kGroupRows, rows.data());
    scalar_kernel(w.type)(ga, 0, kGroupRows);
    for (int64_t t = 0; t < a.n_tokens; ++t)
      std::memcpy(a.y + t * w.rows + r, y.data() + t * kGroupRows, kGroupRows * sizeof(float));
  }
}

}  // namespace

Kernel scalar_panel_kernel(DType type) { return has_panel_layout(type) ? scalar_panels : nullptr; }

}  // namespace matmul_impl

using namespace matmul_impl;

bool panels_pay(const MatrixView& w) {
  return w.layout == WeightLayout::Rows && has_panel_layout(w.type) && w.rows > 0 && w.rows % kGroupRows == 0 &&
         w.row_stride == row_bytes(w.type, w.cols) && active_isa() >= Isa::Avx512 && isa_available(Isa::Avx512) &&
         avx512_panel_kernel(w.type) != nullptr;
}

void repack_panels(const MatrixView& w, uint8_t* out) {
  check_panels(w);
  for (int64_t g = 0; g < w.rows / kGroupRows; ++g) {
    const uint8_t* rows = w.row(g * kGroupRows);
    uint8_t* panels = out + size_t(g) * kGroupRows * w.row_stride;
    for_each_piece(w.type, w.cols, [&](size_t at_row, size_t at_panel, size_t n) {
      std::memcpy(panels + at_panel, rows + at_row, n);
    });
  }
}

void unpack_panel_group(const MatrixView& w, int64_t g, uint8_t* out) {
  check_panels(w);
  const uint8_t* panels = w.row(g * kGroupRows);
  for_each_piece(w.type, w.cols,
                 [&](size_t at_row, size_t at_panel, size_t n) { std::memcpy(out + at_row, panels + at_panel, n); });
}

}  // namespace shardlm
