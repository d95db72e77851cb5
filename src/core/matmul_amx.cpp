#include "core/matmul_kernels.h"

namespace shardlm::matmul_impl {

Kernel amx_kernel(DType) { return nullptr; }

}  // namespace shardlm::matmul_impl
