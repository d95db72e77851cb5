// Random matrices of every compute type for the matmul tests: quantized
// blocks are random bytes with sane f16 scales, so no quantizer is involved.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/matmul.h"
#include "core/quant.h"

namespace shardlm::test {

// y = w · x for n_tokens tokens on one ISA's kernels (NaN where nothing was written).
inline std::vector<float> run(Isa isa, const MatrixView& w, const float* x, int64_t n_tokens, ThreadPool* pool) {
  std::vector<float> y(size_t(n_tokens * w.rows), NAN);
  PreparedInput prepared(x, n_tokens, w.cols);
  matmul_with_isa(isa, w, prepared, y.data(), pool);
  return y;
}

// n normally distributed values, the same for the same seed.
inline std::vector<float> random_vector(int64_t n, uint32_t seed, float spread = 3.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.f, spread);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = normal(rng);
  return v;
}

inline f16_t random_scale(std::mt19937& rng) {
  return f32_to_f16(std::uniform_real_distribution<float>(0.001f, 0.02f)(rng));
}

struct RandomMatrix {
  std::vector<uint8_t> bytes;
  MatrixView view;
  std::vector<float> dequantized;  // rows × cols
};

inline void fix_scales(DType type, uint8_t* block, std::mt19937& rng) {
  const auto set = [&](auto& blk) {
    std::memcpy(&blk, block, sizeof(blk));
    blk.d = random_scale(rng);
    if constexpr (requires { blk.m; }) blk.m = random_scale(rng);
    if constexpr (requires { blk.dmin; }) blk.dmin = random_scale(rng);
    std::memcpy(block, &blk, sizeof(blk));
  };
  switch (type) {
    case DType::Q4_0: { block_q4_0 b; set(b); break; }
    case DType::Q4_1: { block_q4_1 b; set(b); break; }
    case DType::Q5_0: { block_q5_0 b; set(b); break; }
    case DType::Q5_1: { block_q5_1 b; set(b); break; }
    case DType::Q8_0: { block_q8_0 b; set(b); break; }
    case DType::Q2_K: { block_q2_K b; set(b); break; }
    case DType::Q3_K: { block_q3_K b; set(b); break; }
    case DType::Q4_K: { block_q4_K b; set(b); break; }
    case DType::Q5_K: { block_q5_K b; set(b); break; }
    case DType::Q6_K: { block_q6_K b; set(b); break; }
    default: break;
  }
}

inline RandomMatrix random_matrix(DType type, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  RandomMatrix m;
  const size_t stride = row_bytes(type, cols);
  m.bytes.resize(stride * size_t(rows));
  const auto& tr = traits(type);
  if (tr.block_elems == 1) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < rows * cols; ++i) {
      const float v = normal(rng);
      uint8_t* dst = m.bytes.data() + size_t(i) * tr.block_bytes;
      if (type == DType::F32) std::memcpy(dst, &v, 4);
      if (type == DType::F16) { const f16_t h = f32_to_f16(v); std::memcpy(dst, &h, 2); }
      if (type == DType::BF16) { const bf16_t h = f32_to_bf16(v); std::memcpy(dst, &h, 2); }
    }
  } else {
    std::uniform_int_distribution<int> byte(0, 255);
    for (auto& b : m.bytes) b = uint8_t(byte(rng));
    for (size_t off = 0; off < m.bytes.size(); off += tr.block_bytes) fix_scales(type, m.bytes.data() + off, rng);
  }
  m.view = MatrixView{type, m.bytes.data(), rows, cols, stride};
  m.dequantized.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) dequantize_row(type, m.view.row(r), m.dequantized.data() + r * cols, cols);
  return m;
}

// Σ|w·x| over a row: the scale of the rounding error of any summation order.
inline double abs_dot(const float* w, const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(double(w[i]) * double(x[i]));
  return s;
}

// n_tokens × cols activations; one token (if there are 3 or more) is all
// zeros and one block holds a single spike, to reach the edge cases of the
// activation quantizer.
inline std::vector<float> random_activations(int64_t n_tokens, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(size_t(n_tokens * cols));
  for (auto& v : x) v = normal(rng);
  if (n_tokens >= 3) {
    for (int64_t k = 0; k < cols; ++k) x[size_t(1 * cols + k)] = 0.0f;
    for (int64_t k = 0; k < std::min<int64_t>(cols, 32); ++k) x[size_t(2 * cols + k)] = k == 5 ? 7.0f : 0.0f;
  }
  return x;
}

}  // namespace shardlm::test
