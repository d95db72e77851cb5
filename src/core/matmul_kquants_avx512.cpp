// AVX-512 VNNI decode kernels (1-3 tokens) for Q2_K to Q6_K: the
// shared decode of matmul_kquants_decode.h with vpdpwssd folding the
// scale multiply and the accumulation into one instruction. 4 and more
// tokens take the VNNI tiles (matmul_gemm_avx512.cpp); given such a batch,
// this kernel hands it to the AVX2 ones. Internal linkage (see
// matmul_avx512.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/matmul_kernels.h"
#include "core/matmul_kquants_decode.h"

namespace shardlm::matmul_impl {
namespace {

struct VnniScaled {
  static __m256i add_scaled(__m256i acc, __m256i u, __m256i s, __m256i sc) {
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc);
  }
};

template <class Block, class D>
void kernel(const KernelArgs& a, int64_t r0, int64_t r1) {
  if (a.n_tokens <= 3) return decode_k<Block, D>(a, r0, r1);
  avx2_kquant_kernel(a.w->type)(a, r0, r1);
}

}  // namespace

Kernel avx512_kquant_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.avx512 || !caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q2_K: return kernel<block_q2_K, Q2K<VnniScaled>>;
    case DType::Q3_K: return kernel<block_q3_K, Q3K<VnniScaled>>;
    case DType::Q4_K: return kernel<block_q4_K, Q4K<VnniScaled>>;
    case DType::Q5_K: return kernel<block_q5_K, Q5K<VnniScaled>>;
    case DType::Q6_K: return kernel<block_q6_K, Q6K<VnniScaled>>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
