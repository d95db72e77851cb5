// AVX2 kernels for the K-quants × Q8_K activations. Each super-block's sums
// are exact integers (codes × activation codes, weighted by the integer
// sub-block scales in madd), and are scaled in f32 by the reference's
// formula (compiled with FMA, so a last bit may differ from it). Codes carrying
// an offset (Q3_K: -4, Q6_K: -32) are multiplied unsigned and corrected with
// the activation sub-block sums (bsums). Prefill runs on interleaved rows
// (matmul_kquants_avx2_rowgroups.h).
#include <algorithm>
#include <cstring>

#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"
#include "core/matmul_kquants_avx2_rowgroups.h"
#include "core/matmul_kquants_decode.h"
#include "core/quant_blocks.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

float dot_q2_k(const block_q2_K& w, const block_q8_K& x) {
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      const __m256i q = Q2KRows::chunk(w, 4 * h + j);
      const int s = 8 * h + 2 * j;
      acc = _mm256_add_epi32(acc, dot_u8_s8_scaled(q, load32(x.qs + 128 * h + 32 * j), w.scales[s] & 15,
                                                   w.scales[s + 1] & 15));
    }
  }
  int msum = 0;
  for (int s = 0; s < 16; ++s) msum += (w.scales[s] >> 4) * x.bsums[s];
  return x.d * (half_to_float(w.d) * float(hsum(acc)) - half_to_float(w.dmin) * float(msum));
}

float dot_q3_k(const block_q3_K& w, const block_q8_K& x) {
  int8_t sc[16];
  unpack_q3_k_scales(w.scales, sc);
  __m256i acc = _mm256_setzero_si256();
  for (int h = 0; h < 2; ++h) {
    for (int j = 0; j < 4; ++j) {
      const __m256i q = Q3KRows::chunk(w, 4 * h + j);  // code + 4
      const int s = 8 * h + 2 * j;
      acc = _mm256_add_epi32(acc, dot_u8_s8_scaled(q, load32(x.qs + 128 * h + 32 * j), sc[s], sc[s + 1]));
    }
  }
  int offset = 0;
  for (int s = 0; s < 16; ++s) offset += sc[s] * x.bsums[s];
  return x.d * (half_to_float(w.d) * float(hsum(acc) - 4 * offset));
}

// acc + Σ pairs of u8 × s8 products weighted by int16 scales (kquants_decode.h).
struct MaddubsScaled {
  static __m256i add_scaled(__m256i acc, __m256i u, __m256i s, __m256i sc) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc));
  }
};

// Q2_K/Q3_K decode unpacks once per token.
template <class Block, float (*F)(const Block&, const block_q8_K&)>
struct PerToken {
  template <int KT>
  static void run(const Block& w, const block_q8_K* const* x, float* out) {
    for (int t = 0; t < KT; ++t) out[t] += F(w, *x[t]);
  }
};

// The decode of 1-3 tokens, and interleaved row groups from 4 tokens.
template <class Block, class D, class Rows>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens <= 3) return decode_k<Block, D>(a, r0, r1);
  prefill_k_rowgroups<Rows>(a, r0, r1);
}

}  // namespace

Kernel avx2_kquant_kernel(DType type) {
  switch (type) {
    case DType::Q2_K: return kernel<block_q2_K, PerToken<block_q2_K, dot_q2_k>, Q2KRows>;
    case DType::Q3_K: return kernel<block_q3_K, PerToken<block_q3_K, dot_q3_k>, Q3KRows>;
    case DType::Q4_K: return kernel<block_q4_K, Q4K<MaddubsScaled>, Q4KRows>;
    case DType::Q5_K: return kernel<block_q5_K, Q5K<MaddubsScaled>, Q5KRows>;
    case DType::Q6_K: return kernel<block_q6_K, Q6K<MaddubsScaled>, Q6KRows>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
