#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {

Kernel avx2_kquant_kernel(DType) { return nullptr; }

}  // namespace shardlm::matmul_impl
