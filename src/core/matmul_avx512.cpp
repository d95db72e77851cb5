// AVX-512 decode kernels (one token): VNNI for Q4_0/Q8_0 (vpdpbusd replaces
// maddubs + madd), 512-bit FMA for F32. Prefill (several tokens) goes to the
// AVX2 tiles. Compiled with AVX-512 flags; chosen only after cpu.cpp ran a
// trial instruction of each extension. Everything here has internal linkage
// so no AVX-512 copy of an inline helper can replace an AVX2 one at link time.
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation,
// which its own uninitialised-use warnings then flag inside the intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {
namespace {

float hsum512(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float half(uint16_t h) { return _cvtsh_ss(h); }

__m256i q4_codes(const block_q4_0& b) {  // unsigned nibbles, elements 0-15 low, 16-31 high
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  return _mm256_and_si256(_mm256_setr_m128i(raw, _mm_srli_epi16(raw, 4)), _mm256_set1_epi8(0x0F));
}

// Two blocks per 512-bit step: lanes 0-7 hold block b, lanes 8-15 block b+1.
__m512 pair_scale(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(s0)), _mm256_set1_ps(s1), 1);
}

// Σ over blocks of d_w·d_x·Σ(q·a) (+ the Q4_0 offset −8·d_w·ds): q unsigned.
float dot_q4_0(const block_q4_0* w, const block_q8_32* x, int64_t nb) {
  __m512 acc = _mm512_setzero_ps();
  float corr = 0.0f;
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(q4_codes(w[b])), q4_codes(w[b + 1]), 1);
    const __m512i a = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b + 1].qs)), 1);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, a);
    const float d0 = half(w[b].d), d1 = half(w[b + 1].d);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), pair_scale(d0 * x[b].d, d1 * x[b + 1].d), acc);
    corr += -8.0f * d0 * x[b].ds + -8.0f * d1 * x[b + 1].ds;
  }
  float sum = hsum512(acc);
  for (; b < nb; ++b) {
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q4_codes(w[b]),
                                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].qs)));
    const __m256i s = _mm256_hadd_epi32(p, p);
    const __m256i s2 = _mm256_hadd_epi32(s, s);
    const int isum = _mm256_extract_epi32(s2, 0) + _mm256_extract_epi32(s2, 4);
    const float d = half(w[b].d);
    sum += d * x[b].d * float(isum) - 8.0f * d * x[b].ds;
  }
  return sum + corr;
}

// Q8_0 codes are signed: |q| (unsigned) against sign(q)·a.
float dot_q8_0(const block_q8_0* w, const block_q8_32* x, int64_t nb) {
  __m512 acc = _mm512_setzero_ps();
  int64_t b = 0;
  const auto load = [](const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); };
  for (; b + 1 < nb; b += 2) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(load(w[b].qs)), load(w[b + 1].qs), 1);
    const __m512i a = _mm512_inserti64x4(_mm512_castsi256_si512(load(x[b].qs)), load(x[b + 1].qs), 1);
    // a negated where q < 0 (where q == 0, |q| already zeroes the product)
    const __m512i sa = _mm512_mask_sub_epi8(a, _mm512_movepi8_mask(q), _mm512_setzero_si512(), a);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(q), sa);
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), pair_scale(half(w[b].d) * x[b].d, half(w[b + 1].d) * x[b + 1].d),
                          acc);
  }
  float sum = hsum512(acc);
  for (; b < nb; ++b) {
    const __m256i q = load(w[b].qs);
    const __m256i p = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_abs_epi8(q),
                                          _mm256_sign_epi8(load(x[b].qs), q));
    const __m256i s = _mm256_hadd_epi32(p, p);
    const __m256i s2 = _mm256_hadd_epi32(s, s);
    sum += half(w[b].d) * x[b].d * float(_mm256_extract_epi32(s2, 0) + _mm256_extract_epi32(s2, 4));
  }
  return sum;
}

float dot_f32(const float* w, const float* x, int64_t n) {
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 32 <= n; k += 32) {
    acc0 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k), _mm512_loadu_ps(x + k), acc0);
    acc1 = _mm512_fmadd_ps(_mm512_loadu_ps(w + k + 16), _mm512_loadu_ps(x + k + 16), acc1);
  }
  for (; k < n; k += 16) {
    const __mmask16 m = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
    acc0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, w + k), _mm512_maskz_loadu_ps(m, x + k), acc0);
  }
  return hsum512(_mm512_add_ps(acc0, acc1));
}

template <class Block, float (*Dot)(const Block*, const block_q8_32*, int64_t)>
float row_blocks(const KernelArgs& a, int64_t r) {
  return Dot(reinterpret_cast<const Block*>(a.w->row(r)), static_cast<const block_q8_32*>(a.x), a.w->cols / 32);
}

float row_f32(const KernelArgs& a, int64_t r) {
  return dot_f32(reinterpret_cast<const float*>(a.w->row(r)), static_cast<const float*>(a.x), a.w->cols);
}

template <float (*Row)(const KernelArgs&, int64_t)>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens != 1) {
    avx2_kernel(a.w->type)(a, r0, r1);
    return;
  }
  for (int64_t r = r0; r < r1; ++r) a.y[r] = Row(a, r);
}

}  // namespace

Kernel avx512_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.avx512) return nullptr;
  switch (type) {
    case DType::F32: return kernel<row_f32>;
    case DType::Q4_0: return caps.avx512_vnni ? kernel<row_blocks<block_q4_0, dot_q4_0>> : nullptr;
    case DType::Q8_0: return caps.avx512_vnni ? kernel<row_blocks<block_q8_0, dot_q8_0>> : nullptr;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
