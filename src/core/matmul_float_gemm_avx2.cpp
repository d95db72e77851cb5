// AVX2 columns and reduction for matmul_float_gemm.h: tiles of 2 rows × 6
// tokens (12 sums, 2 weight vectors and an activation vector: 15 of the 16
// registers), 8 columns a vector, weights widened to f32 on load as the
// float decode kernels read them (matmul_avx2_common.h). Compiled with AVX2
// flags.
#include <immintrin.h>

#include "core/matmul_avx2_common.h"
#include "core/matmul_float_gemm.h"

namespace shardlm::matmul_impl {
namespace {

struct Ymm {
  using Vec = __m256;
  static constexpr int kLanes = 8, kRows = 2, kTokens = 6;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  static void reduce(const Vec (&acc)[kRows], float* out) {
    for (int i = 0; i < kRows; ++i) out[i] = avx2::hsum(acc[i]);
  }
};

}  // namespace

Kernel avx2_float_gemm_kernel(DType type) {
  switch (type) {
    case DType::F32: return float_gemm<Ymm, WidenedColumns<Ymm, avx2::F32W>>;
    case DType::F16: return float_gemm<Ymm, WidenedColumns<Ymm, avx2::F16W>>;
    case DType::BF16: return float_gemm<Ymm, WidenedColumns<Ymm, avx2::BF16W>>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
