// AVX2 kernels for float weights and 32-element quantized blocks.
// Decode (one token; floats: up to three) streams each row once. Float
// prefill runs matmul_float_gemm.h's tiles (matmul_float_gemm_avx2.cpp),
// quantized prefill interleaved rows (matmul_avx2_rowgroups.h).
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "core/matmul_avx2_common.h"
#include "core/matmul_avx2_rowgroups.h"
#include "core/matmul_decode32.h"
#include "core/matmul_kernels.h"
#include "core/matmul_strided_rows.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// 32 unsigned × 32 signed bytes → 8 int32 sums of 4 products (decode32.h).
struct MaddubsDot {
  static __m256i dot(__m256i u, __m256i s) { return dot_u8_s8(u, s); }
};

// Prefill of the 32-element block types runs on interleaved rows
// (matmul_avx2_rowgroups.h).
template <class W>
void prefill32(const KernelArgs& a, int64_t r0, int64_t r1) {
  switch (a.n_tokens) {
    case 2: return few_tokens<MaddubsDot, W, 2>(a, r0, r1);
    case 3: return few_tokens<MaddubsDot, W, 3>(a, r0, r1);  // 4 and more: the row groups do better
    default: return prefill_rowgroups<W>(a, r0, r1);
  }
}

// ---- float weights (F32W, F16W, BF16W: matmul_avx2_common.h) ----------------

// R rows × T tokens of float dot products, 32 elements per step, each row
// prefetched kPrefetchBytes ahead, a line per line consumed. The sums are
// those of the one-row decode (T = 1: four chains, one per 8 elements of a
// step) and of the prefill tiles (T = 2, 3: one chain), in the same order:
// 8-element tail into chain 0, the chains added pairwise, the scalar tail
// last. A row's arithmetic is the same whatever R.
template <class W, int R, int T>
void dot_rows_float(const uint8_t* const* w, const float* const* x, int64_t n, float out[][3]) {
  constexpr int A = T == 1 ? 4 : 1;
  __m256 acc[R][T][A];
  for (auto& per_row : acc)
    for (auto& per_token : per_row)
      for (auto& v : per_token) v = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    for (int i = 0; i < R; ++i)
      for (size_t off = 0; off < 32 * W::kBytes; off += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w[i] + k * W::kBytes) + kPrefetchBytes + off, _MM_HINT_T0);
#pragma GCC unroll 4
    for (int u = 0; u < 4; ++u) {
      __m256 wv[R];
      for (int i = 0; i < R; ++i) wv[i] = W::load(w[i] + (k + 8 * u) * W::kBytes);
#pragma GCC unroll 3
      for (int t = 0; t < T; ++t) {
        const __m256 xv = _mm256_loadu_ps(x[t] + k + 8 * u);
        for (int i = 0; i < R; ++i) acc[i][t][u % A] = _mm256_fmadd_ps(wv[i], xv, acc[i][t][u % A]);
      }
    }
  }
  for (; k + 8 <= n; k += 8)
    for (int t = 0; t < T; ++t)
      for (int i = 0; i < R; ++i)
        acc[i][t][0] = _mm256_fmadd_ps(W::load(w[i] + k * W::kBytes), _mm256_loadu_ps(x[t] + k), acc[i][t][0]);
  for (int i = 0; i < R; ++i)
    for (int t = 0; t < T; ++t) {
      float sum;
      if constexpr (A == 4) {
        sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[i][t][0], acc[i][t][1]), _mm256_add_ps(acc[i][t][2], acc[i][t][3])));
      } else {
        sum = hsum(acc[i][t][0]);
      }
      for (int64_t kk = k; kk < n; ++kk) sum += W::one(w[i] + kk * W::kBytes) * x[t][kk];
      out[i][t] = sum;
    }
}

// Decode (1-3 tokens): matmul_strided_rows.h's order, S rows a group (S
// fits the accumulators in 16 registers).
template <class W, int T>
void float_decode(const KernelArgs& a, int64_t r0, int64_t r1) {
  strided_rows<T == 2 ? 4 : 3, T>(a, r0, r1, [&](auto rows, const uint8_t* const* w, const float* const* x,
                                                 float out[][3]) {
    dot_rows_float<W, decltype(rows)::value, T>(w, x, a.w->cols, out);
  });
}

// ---- drivers ------------------------------------------------------------------

template <class Policy>
struct Blocks32 {
  static constexpr int64_t kDecodeTokens = 1;  // 2 and 3: prefill32
  static void decode(const KernelArgs& a, int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) a.y[r] = row(a, r, 0);
  }
  static void prefill(const KernelArgs& a, int64_t r0, int64_t r1) { prefill32<Policy>(a, r0, r1); }
  static float row(const KernelArgs& a, int64_t r, int64_t t) {
    const block_q8_32* x = token_blocks(a, t);
    float out;
    dot_rows<MaddubsDot, Policy, 1>(a.w->row(r), &x, a.w->cols / 32, &out);
    return out;
  }
};

template <class Policy>
struct Floats {
  static constexpr int64_t kDecodeTokens = 3;
  static void decode(const KernelArgs& a, int64_t r0, int64_t r1) {
    switch (a.n_tokens) {
      case 1: return float_decode<Policy, 1>(a, r0, r1);
      case 2: return float_decode<Policy, 2>(a, r0, r1);
      default: return float_decode<Policy, 3>(a, r0, r1);
    }
  }
  static void prefill(const KernelArgs& a, int64_t r0, int64_t r1) { avx2_float_gemm_kernel(a.w->type)(a, r0, r1); }
};

template <class K>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens <= K::kDecodeTokens) return K::decode(a, r0, r1);
  K::prefill(a, r0, r1);
}

}  // namespace

Kernel avx2_kernel(DType type) {
  switch (type) {
    case DType::F32: return kernel<Floats<F32W>>;
    case DType::F16: return kernel<Floats<F16W>>;
    case DType::BF16: return kernel<Floats<BF16W>>;
    case DType::Q4_0: return kernel<Blocks32<Q4_0W>>;
    case DType::Q4_1: return kernel<Blocks32<Q4_1W>>;
    case DType::Q5_0: return kernel<Blocks32<Q5_0W>>;
    case DType::Q5_1: return kernel<Blocks32<Q5_1W>>;
    case DType::Q8_0: return kernel<Blocks32<Q8_0W>>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// Same arithmetic as the scalar quantize_block (max|x| exactly, one IEEE
// division, x·(127/max|x|) rounded to nearest even), so the bytes are identical.
float quantize_block_avx2(const float* x, int8_t* q, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax = _mm256_setzero_ps();
  for (int i = 0; i < n; i += 8) amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  const float d = _mm_cvtss_f32(m) / 127.0f;
  const float amax_s = _mm_cvtss_f32(m);
  const __m256 id = _mm256_set1_ps(amax_s > 0.0f ? 127.0f / amax_s : 0.0f);
  for (int i = 0; i < n; i += 32) {
    __m256i v[4];
    for (int u = 0; u < 4; ++u) v[u] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + i + 8 * u), id));
    // packs interleave 128-bit lanes; the permute restores element order
    const __m256i words = _mm256_packs_epi32(v[0], v[1]), words2 = _mm256_packs_epi32(v[2], v[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words, words2),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
  }
  return d;
}

int sum_codes(const int8_t* q) {  // 32 codes
  const __m256i v = load32(q);
  return hsum(_mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), v), _mm256_set1_epi16(1)));
}

}  // namespace

void quantize_act_q8_32_avx2(const float* x, block_q8_32* out, int64_t cols) {
  for (int64_t b = 0; b < cols / 32; ++b) {
    const float d = quantize_block_avx2(x + b * 32, out[b].qs, 32);
    const int sum = sum_codes(out[b].qs);
    // Both scales to f16 and back in one F16C round trip (round_scale_to_f16's
    // nearest-even rounding, the same bits).
    const __m128 rounded =
        _mm_cvtph_ps(_mm_cvtps_ph(_mm_setr_ps(d, d * float(sum), 0.0f, 0.0f), _MM_FROUND_TO_NEAREST_INT));
    out[b].d = _mm_cvtss_f32(rounded);
    out[b].ds = out[b].d * float(sum);
    out[b].minus8_sum = -8 * sum;
    out[b].s_f16 = _mm_cvtss_f32(_mm_movehdup_ps(rounded));
  }
}

void round_act_f16_avx2(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
  for (; i < n; ++i) out[i] = f16_to_f32(f32_to_f16(x[i]));
}

// f32_to_bf16's rounding (to nearest even; a NaN quieted) on 8 lanes.
void round_act_bf16_avx2(const float* x, float* out, int64_t n) {
  const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff), top = _mm256_set1_epi32(int(0xffff0000u));
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + i));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
    const __m256i rounded = _mm256_and_si256(_mm256_add_epi32(u, _mm256_add_epi32(bias, odd)), top);
    const __m256i quiet = _mm256_and_si256(_mm256_or_si256(u, _mm256_set1_epi32(0x400000)), top);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_blendv_epi8(rounded, quiet, nan));
  }
  for (; i < n; ++i) out[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

void quantize_act_q8_k_avx2(const float* x, block_q8_K* out, int64_t cols) {
  for (int64_t b = 0; b < cols / QK_K; ++b) {
    out[b].d = quantize_block_avx2(x + b * QK_K, out[b].qs, QK_K);
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += out[b].qs[16 * g + i];
      out[b].bsums[g] = int16_t(sum);
    }
  }
}

}  // namespace shardlm::matmul_impl
