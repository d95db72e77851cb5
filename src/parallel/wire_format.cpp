#include "parallel/wire_format.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant.h"

namespace shardlm::parallel {
namespace {

size_t block_elems(DType t) { return size_t(traits(t).block_elems); }
size_t padded(DType t, size_t n) { return (n + block_elems(t) - 1) / block_elems(t) * block_elems(t); }

}  // namespace

bool is_wire_type(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0; }

DType wire_type_from_name(const std::string& name, const std::string& what) {
  const auto t = dtype_from_name(name);
  if (!t || !is_wire_type(*t)) throw Error(fmt::format("{}: '{}' is not f32, f16, bf16 or q8_0", what, name));
  return *t;
}

std::string wire_type_name(DType t) {
  std::string s(dtype_name(t));
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

size_t wire_row_bytes(DType t, size_t n) { return row_bytes(t, int64_t(padded(t, n))); }

void wire_encode(DType t, const float* x, size_t rows, size_t n, uint8_t* out) {
  const size_t full = n / block_elems(t) * block_elems(t), tail = n - full;
  const size_t stride = wire_row_bytes(t, n), full_bytes = row_bytes(t, int64_t(full));
  std::vector<float> last(tail ? block_elems(t) : 0, 0.0f);
  for (size_t r = 0; r < rows; ++r) {
    const float* row = x + r * n;
    uint8_t* dst = out + r * stride;
    if (full) quantize_row(t, row, dst, int64_t(full));
    if (tail) {
      std::copy_n(row + full, tail, last.begin());
      quantize_row(t, last.data(), dst + full_bytes, int64_t(last.size()));
    }
  }
}

void wire_decode(DType t, const uint8_t* in, size_t rows, size_t n, float* out) {
  const size_t full = n / block_elems(t) * block_elems(t), tail = n - full;
  const size_t stride = wire_row_bytes(t, n), full_bytes = row_bytes(t, int64_t(full));
  std::vector<float> last(tail ? block_elems(t) : 0);
  for (size_t r = 0; r < rows; ++r) {
    const uint8_t* src = in + r * stride;
    float* row = out + r * n;
    if (full) dequantize_row(t, src, row, int64_t(full));
    if (tail) {
      dequantize_row(t, src + full_bytes, last.data(), int64_t(last.size()));
      std::copy_n(last.begin(), tail, row + full);
    }
  }
}

}  // namespace shardlm::parallel
