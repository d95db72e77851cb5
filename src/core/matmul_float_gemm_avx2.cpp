// AVX2 columns and reduction for matmul_float_gemm.h: tiles of 2 rows × 6
// tokens (12 sums, 2 weight vectors and an activation vector: 15 of the 16
// registers), 8 columns a vector, weights widened to f32 on load. Compiled
// with AVX2 flags.
#include <immintrin.h>

#include "core/matmul_float_gemm.h"

namespace shardlm::matmul_impl {
namespace {

struct Ymm {
  using Vec = __m256;
  static constexpr int kLanes = 8, kRows = 2, kTokens = 6;
  static Vec zero() { return _mm256_setzero_ps(); }
  static Vec load(const float* p) { return _mm256_loadu_ps(p); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm256_fmadd_ps(a, b, c); }
  // Each sum in the same order whatever the other row holds: adjacent pairs
  // twice (hadd), then the two 128-bit halves.
  static void reduce(const Vec (&acc)[kRows], float* out) {
    for (int i = 0; i < kRows; ++i) {
      __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc[i]), _mm256_extractf128_ps(acc[i], 1));
      s = _mm_add_ps(s, _mm_movehl_ps(s, s));
      out[i] = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
    }
  }
};

struct F32Load {
  static constexpr size_t kBytes = 4;
  static __m256 load(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
};
struct F16Load {
  static constexpr size_t kBytes = 2;
  static __m256 load(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
};
struct BF16Load {
  static constexpr size_t kBytes = 2;
  static __m256 load(const uint8_t* p) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
};

}  // namespace

Kernel avx2_float_gemm_kernel(DType type) {
  switch (type) {
    case DType::F32: return float_gemm<Ymm, WidenedColumns<Ymm, F32Load>>;
    case DType::F16: return float_gemm<Ymm, WidenedColumns<Ymm, F16Load>>;
    case DType::BF16: return float_gemm<Ymm, WidenedColumns<Ymm, BF16Load>>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
