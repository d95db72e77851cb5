// AVX2 kernels for the K-quants × Q8_K activations. Each super-block's sums
// are exact integers (codes × activation codes, weighted by the integer
// sub-block scales in madd), and are scaled in f32 by the reference's
// formula (compiled with FMA, so a last bit may differ from it). Codes carrying
// an offset (Q3_K: -4, Q6_K: -32) are multiplied unsigned and corrected with
// the activation sub-block sums (bsums). Prefill runs on interleaved rows
// (matmul_kquants_avx2_rowgroups.h).
#include "core/matmul_avx2_common.h"
#include "core/matmul_kernels.h"
#include "core/matmul_kquants_avx2_rowgroups.h"
#include "core/matmul_kquants_decode.h"

namespace shardlm::matmul_impl {
namespace {

using namespace avx2;

// acc + Σ pairs of u8 × s8 products weighted by int16 scales (kquants_decode.h).
struct MaddubsScaled {
  static __m256i add_scaled(__m256i acc, __m256i u, __m256i s, __m256i sc) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc));
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
    case DType::Q2_K: return kernel<block_q2_K, Q2K<MaddubsScaled>, Q2KRows>;
    case DType::Q3_K: return kernel<block_q3_K, Q3K<MaddubsScaled>, Q3KRows>;
    case DType::Q4_K: return kernel<block_q4_K, Q4K<MaddubsScaled>, Q4KRows>;
    case DType::Q5_K: return kernel<block_q5_K, Q5K<MaddubsScaled>, Q5KRows>;
    case DType::Q6_K: return kernel<block_q6_K, Q6K<MaddubsScaled>, Q6KRows>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl
