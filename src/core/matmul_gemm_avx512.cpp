// AVX-512 VNNI kernels for 4 and more tokens (prefill and batched decode):
// the panels and vpdpbusd tiles of matmul_gemm.h, on GGUF rows or on weights
// repacked as panels (any token count there). Compiled with AVX-512 flags.
// GCC 12's AVX-512 headers build "undefined" vectors by self-initialisation,
// which its own uninitialised-use warnings then flag inside the intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "core/matmul_gemm.h"

namespace shardlm::matmul_impl {

Kernel avx512_gemm_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.avx512 || !caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q4_0: return gemm<Blocks32<Q4_0P>>;
    case DType::Q4_1: return gemm<Blocks32<Q4_1P>>;
    case DType::Q5_0: return gemm<Blocks32<Q5_0P>>;
    case DType::Q5_1: return gemm<Blocks32<Q5_1P>>;
    case DType::Q8_0: return gemm<Blocks32<Q8_0P>>;
    case DType::Q2_K: return gemm<KQuant<Q2_KP>>;
    case DType::Q3_K: return gemm<KQuant<Q3_KP>>;
    case DType::Q4_K: return gemm<KQuant<Q4_KP>>;
    case DType::Q5_K: return gemm<KQuant<Q5_KP>>;
    case DType::Q6_K: return gemm<KQuant<Q6_KP>>;
    default: return nullptr;
  }
}

Kernel avx512_panel_kernel(DType type) {
  const CpuCaps& caps = cpu_caps();
  if (!caps.avx512 || !caps.avx512_vnni) return nullptr;
  switch (type) {
    case DType::Q4_0: return gemm<Blocks32<Q4_0P>, PanelGroup>;
    case DType::Q4_1: return gemm<Blocks32<Q4_1P>, PanelGroup>;
    case DType::Q5_0: return gemm<Blocks32<Q5_0P>, PanelGroup>;
    case DType::Q5_1: return gemm<Blocks32<Q5_1P>, PanelGroup>;
    case DType::Q8_0: return gemm<Blocks32<Q8_0P>, PanelGroup>;
    case DType::Q2_K: return gemm<KQuant<Q2_KP>, PanelGroup>;
    case DType::Q3_K: return gemm<KQuant<Q3_KP>, PanelGroup>;
    case DType::Q4_K: return gemm<KQuant<Q4_KP>, PanelGroup>;
    case DType::Q5_K: return gemm<KQuant<Q5_KP>, PanelGroup>;
    case DType::Q6_K: return gemm<KQuant<Q6_KP>, PanelGroup>;
    default: return nullptr;
  }
}

}  // namespace shardlm::matmul_impl

#pragma GCC diagnostic pop
