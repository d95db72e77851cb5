#include "core/error.h"
#include "core/quant.h"
#include "core/quant_impl.h"

namespace shardlm {
namespace quant_impl {
void quantize_q2_K(const float*, void*, int64_t) { throw Error("quantize_row: Q2_K encoder not implemented yet"); }
void quantize_q3_K(const float*, void*, int64_t) { throw Error("quantize_row: Q3_K encoder not implemented yet"); }
void quantize_q4_K(const float*, void*, int64_t) { throw Error("quantize_row: Q4_K encoder not implemented yet"); }
void quantize_q5_K(const float*, void*, int64_t) { throw Error("quantize_row: Q5_K encoder not implemented yet"); }
void quantize_q6_K(const float*, void*, int64_t) { throw Error("quantize_row: Q6_K encoder not implemented yet"); }
}  // namespace quant_impl
void quantize_row_q8_K(const float*, block_q8_K*, int64_t) { throw Error("quantize_row: Q8_K encoder not implemented yet"); }
}  // namespace shardlm
