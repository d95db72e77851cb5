#include "model/kv_cache.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"

namespace shardlm {
namespace {

void convert(const float* src, uint8_t* dst, int64_t n, DType type) {
  if (type == DType::F32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  auto* h = reinterpret_cast<f16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_f16(src[i]);
}

}  // namespace

KvCache::KvCache(int64_t n_layer, int64_t n_seq, int64_t n_ctx, int64_t n_head, int64_t head_dim_k,
                 int64_t head_dim_v, DType type, bool values_in_keys)
    : n_layer_(n_layer), n_seq_(n_seq), n_ctx_(n_ctx), n_head_(n_head), dim_k_(head_dim_k), dim_v_(head_dim_v),
      type_(type), values_in_keys_(values_in_keys) {
  if (values_in_keys && head_dim_v > head_dim_k)
    throw Error("KV cache: values stored in keys must not be longer than them");
  const int64_t v_stored = values_in_keys ? 0 : head_dim_v;
  if (type != DType::F32 && type != DType::F16)
    throw Error(fmt::format("KV cache type must be f32 or f16, not {}", dtype_name(type)));
  if (n_seq < 1 || n_ctx < 1 || n_ctx > (int64_t(1) << 24) || n_seq > 4096)
    throw Error(fmt::format("KV cache: context {} × sequences {} is out of range", n_ctx, n_seq));
  elem_ = type == DType::F32 ? 4 : 2;
  const double total = double(n_layer) * double(n_seq) * double(n_ctx) * double(n_head) *
                       double(head_dim_k + v_stored) * double(elem_);
  if (total > double(uint64_t(1) << 40))
    throw Error(fmt::format("KV cache of {:.1f} GiB is too large: lower --ctx", total / (1u << 30)));
  const size_t per = bytes_per_dim();
  bytes_ = per * size_t(head_dim_k + v_stored);
  try {
    // Pages are touched only as positions are written; 2 MiB ones where the
    // OS grants them: attention streams every cached row of a sequence each
    // step, and with 4 KiB pages a long context's rows cost a page walk
    // every 16 rows.
    k_ = alloc_huge_page_buffer(per * size_t(head_dim_k));
    if (v_stored > 0) v_ = alloc_huge_page_buffer(per * size_t(v_stored));
  } catch (const Error&) {
    throw Error(fmt::format("KV cache: cannot allocate {:.1f} MiB: lower --ctx", double(bytes_) / (1 << 20)));
  }
}

void KvCache::commit_pages() {
  const size_t per = bytes_per_dim();
  std::memset(k_.get(), 0, per * size_t(dim_k_));
  if (!values_in_keys_) std::memset(v_.get(), 0, per * size_t(dim_v_));
}

void KvCache::store(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v) {
  for (int64_t h = 0; h < n_head_; ++h)
    store_head(layer, seq, pos, h, k + h * dim_k_, values_in_keys_ ? nullptr : v + h * dim_v_);
}

void KvCache::store_head(int64_t layer, int64_t seq, int64_t pos, int64_t head, const float* k, const float* v) {
  convert(k, slot(k_.get(), layer, seq, head, pos, dim_k_), dim_k_, type_);
  if (!values_in_keys_) convert(v, slot(v_.get(), layer, seq, head, pos, dim_v_), dim_v_, type_);
}

}  // namespace shardlm
