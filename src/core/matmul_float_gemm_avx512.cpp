// AVX-512 columns and reduction for matmul_float_gemm.h: tiles of 4 rows × 6
// tokens, 16 columns a vector, weights widened to f32 on load. BF16 where
// the CPU has AVX512_BF16: vdpbf16ps multiplies pairs of BF16 weights and
// activations (already rounded to BF16, core/matmul_kernels.h's ActFormat,
// so packing them is exact) and adds both exact products to the f32 sum, 32
// columns an instruction. Compiled with AVX-512 flags.
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation,
// which its own uninitialised-use warnings then flag inside the intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/matmul_float_gemm.h"
#include "core/matmul_float_loads_avx512.h"

namespace shardlm::matmul_impl {
namespace {

struct Zmm {
  using Vec = __m512;
  static constexpr int kLanes = 16, kRows = 4, kTokens = 6;
  static Vec zero() { return _mm512_setzero_ps(); }
  static Vec load(const float* p) { return _mm512_loadu_ps(p); }
  static Vec fmadd(Vec a, Vec b, Vec c) { return _mm512_fmadd_ps(a, b, c); }
  // Each sum in the same order whatever the other rows hold: halves added,
  // adjacent pairs twice (hadd), then the two 128-bit halves.
  static void reduce(const Vec (&acc)[kRows], float* out) {
    const auto half = [](__m512 v) { return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)); };
    const __m256 h = _mm256_hadd_ps(_mm256_hadd_ps(half(acc[0]), half(acc[1])), _mm256_hadd_ps(half(acc[2]), half(acc[3])));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
  }
};

struct F32Load {
  static constexpr size_t kBytes = 4;
  static __m512 load(const uint8_t* p) { return _mm512_loadu_ps(p); }
};

struct BF16Pairs {
  static constexpr int64_t kStep = 32;
  static constexpr size_t kWeightBytes = 2;
  using XElem = uint16_t;
  static __m512 w(const uint8_t* p) { return _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static __m512 x(const uint16_t* p) { return _mm512_castsi512_ps(_mm512_loadu_si512(p)); }
  static __m512 madd(__m512 acc, __m512 w, __m512 x) { return _mm512_dpbf16_ps(acc, __m512bh(w), __m512bh(x)); }
  static void x_chunk(const float* x, int64_t k0, int64_t n, uint16_t* packed) {
    for (int64_t k = 0; k < n; k += 32) {
      const __mmask16 lo = _bzhi_u32(0xFFFF, unsigned(std::clamp<int64_t>(n - k, 0, 16)));
      const __mmask16 hi = _bzhi_u32(0xFFFF, unsigned(std::clamp<int64_t>(n - k - 16, 0, 16)));
      const __m512 a = _mm512_maskz_loadu_ps(lo, x + k0 + k), b = _mm512_maskz_loadu_ps(hi, x + k0 + k + 16);
      _mm512_storeu_si512(packed + k, __m512i(_mm512_cvtne2ps_pbh(b, a)));
    }
  }
};

}  // namespace

Kernel avx512_float_gemm_kernel(DType type) { return avx512_float_gemm_kernel(type, cpu_caps().avx512_bf16); }

Kernel avx512_float_gemm_kernel(DType type, bool bf16_pairs) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.avx512 || (bf16_pairs && !caps.avx512_bf16)) return nullptr;
  switch (type) {
    case DType::F32: return float_gemm<Zmm, WidenedColumns<Zmm, F32Load>>;
    case DType::F16: return float_gemm<Zmm, WidenedColumns<Zmm, F16x16>>;
    case DType::BF16: return bf16_pairs ? float_gemm<Zmm, BF16Pairs> : float_gemm<Zmm, WidenedColumns<Zmm, BF16x16>>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
