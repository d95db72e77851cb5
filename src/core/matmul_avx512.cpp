// AVX-512 decode kernels (1-3 tokens) for float weights (measured, not
// dispatched: see matmul_dispatch.cpp) and 32-element blocks. The blocks run
// the shared decode of matmul_decode32.h with VNNI's vpdpbusd as the byte
// product (one instruction for maddubs + madd, on 256-bit vectors: three
// ports take those, where 512-bit work has two). Float rows are read 16
// elements per vector. From 4 tokens on, floats run matmul_float_gemm.h and
// the blocks the VNNI tiles of matmul_gemm.h (matmul.cpp's own_kernel).
// Compiled with AVX-512 flags; chosen only after cpu.cpp ran a trial
// instruction of each extension. Internal linkage throughout, so no AVX-512
// copy of an inline helper can replace an AVX2 one at link time.
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation,
// which its own uninitialised-use warnings then flag inside the intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/matmul_avx2_common.h"
#include "core/matmul_decode32.h"
#include "core/matmul_float_loads_avx512.h"
#include "core/matmul_kernels.h"
#include "core/matmul_strided_rows.h"

namespace shardlm::matmul_impl {
namespace {

struct VnniDot {
  static __m256i dot(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }
};

float hsum512(__m512 v) {
  return avx2::hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}

// 16 F32 weights at p (F16x16, BF16x16: matmul_float_loads_avx512.h); the
// masked form reads only the first lanes of m. Two 256-bit loads: with one
// 512-bit load, rows streamed from DRAM at 3 tokens ran at half the rate on
// Zen 5 (docs/bench/flt5.md).
struct F32x16 {
  static constexpr size_t kBytes = 4;
  static __m512 load(const uint8_t* p) {
    const auto* f = reinterpret_cast<const float*>(p);
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(f)), _mm256_loadu_ps(f + 8), 1);
  }
  static __m512 load(const uint8_t* p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
};

// R rows × T tokens of dot products: U vectors of 16 elements per row and
// step, in two independent FMA chains per row and token, each row prefetched
// kPrefetchBytes ahead, a line per line consumed; the tail is masked (rows
// need not fill a vector). The R rows share each activation load. A row's
// arithmetic is the same whatever R, so results do not depend on how rows
// were grouped.
template <class W, int R, int T>
void dot_rows_float(const uint8_t* const* w, const float* const* x, int64_t n, float out[][3]) {
  constexpr int A = 2, U = T == 1 ? 2 : 4;
  __m512 acc[R][T][A];
  for (auto& per_row : acc)
    for (auto& per_token : per_row)
      for (auto& v : per_token) v = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 * U <= n; k += 16 * U) {
    for (int i = 0; i < R; ++i)
      for (size_t off = 0; off < 16 * U * W::kBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w[i] + k * W::kBytes) + avx2::kPrefetchBytes + off, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      __m512 wv[R];
      for (int i = 0; i < R; ++i) wv[i] = W::load(w[i] + (k + 16 * u) * W::kBytes);
#pragma GCC unroll 3
      for (int t = 0; t < T; ++t) {
        const __m512 xv = _mm512_loadu_ps(x[t] + k + 16 * u);
        for (int i = 0; i < R; ++i) acc[i][t][u % A] = _mm512_fmadd_ps(wv[i], xv, acc[i][t][u % A]);
      }
    }
  }
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
    for (int t = 0; t < T; ++t) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x[t] + k);
      for (int i = 0; i < R; ++i) acc[i][t][0] = _mm512_fmadd_ps(W::load(w[i] + k * W::kBytes, m), xv, acc[i][t][0]);
    }
  }
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) {
      __m512 sum = acc[i][t][0];
      for (int j = 1; j < A; ++j) sum = _mm512_add_ps(sum, acc[i][t][j]);
      out[i][t] = hsum512(sum);
    }
}

// Rows in matmul_strided_rows.h's order. S and the step (U vectors) are
// what measured best on Zen 5: one token 3 rows of 32 elements, 2-3 tokens 4
// rows of 64, whose more independent chains also run 1.2-1.5x faster than
// AVX2 hot (F16/BF16). From DRAM they still do not beat AVX2's, so decode
// runs those (matmul_dispatch.cpp).
template <class W, int T>
void float_tokens(const KernelArgs& a, int64_t r0, int64_t r1) {
  strided_rows<T == 1 ? 3 : 4, T>(a, r0, r1, [&](auto rows, const uint8_t* const* w, const float* const* x,
                                                 float out[][3]) {
    dot_rows_float<W, decltype(rows)::value, T>(w, x, a.w->cols, out);
  });
}

struct Floats {
  template <class W, int T>
  static void rows(const KernelArgs& a, int64_t r0, int64_t r1) { float_tokens<W, T>(a, r0, r1); }
};
struct Blocks32 {
  template <class W, int T>
  static void rows(const KernelArgs& a, int64_t r0, int64_t r1) { few_tokens<VnniDot, W, T>(a, r0, r1); }
};

template <class Shape, class W>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  switch (a.n_tokens) {
    case 1: return Shape::template rows<W, 1>(a, r0, r1);
    case 2: return Shape::template rows<W, 2>(a, r0, r1);
    case 3: return Shape::template rows<W, 3>(a, r0, r1);
    default: return avx2_kernel(a.w->type)(a, r0, r1);
  }
}

}  // namespace

Kernel avx512_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.avx512) return nullptr;
  switch (type) {
    case DType::F32: return kernel<Floats, F32x16>;
    case DType::F16: return kernel<Floats, F16x16>;
    case DType::BF16: return kernel<Floats, BF16x16>;
    default: break;
  }
  if (!caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q4_0: return kernel<Blocks32, Q4_0W>;
    case DType::Q4_1: return kernel<Blocks32, Q4_1W>;
    case DType::Q5_0: return kernel<Blocks32, Q5_0W>;
    case DType::Q5_1: return kernel<Blocks32, Q5_1W>;
    case DType::Q8_0: return kernel<Blocks32, Q8_0W>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
