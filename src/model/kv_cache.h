// Keys and values of every position already seen, per layer and sequence,
// stored as F32 or F16. Sized once for --ctx × n_seq: never the model's
// training context, which can be 128k. With values_in_keys (latent attention)
// only key rows are stored and a position's value is the first v_dim elements
// of its key row.
//
// Head-major: per layer, sequence and KV head, the rows of all positions are
// contiguous ([layer][seq][head][pos][dim]), so attention streams one head's
// rows in address order, which the hardware prefetchers follow; position-major
// rows of one head would be n_head rows apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace shardlm {

class KvCache {
 public:
  // head_dim_k / head_dim_v: the elements of one head's key / value row.
  // Throws Error for a type other than F32/F16 or a size that does not fit in memory.
  KvCache(int64_t n_layer, int64_t n_seq, int64_t n_ctx, int64_t n_head, int64_t head_dim_k, int64_t head_dim_v,
          DType type, bool values_in_keys = false);

  DType type() const { return type_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_seq() const { return n_seq_; }
  size_t bytes() const { return bytes_; }
  // Writes zeros over the whole cache, so that every page is resident now
  // rather than as positions are first written.
  void commit_pages();

  // Converts the n_head · head_dim_k key and n_head · head_dim_v value floats
  // of one token (heads one after the other) into the slots of (layer, seq,
  // pos); v is ignored with values_in_keys.
  void store(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v);
  // store for one head: k has head_dim_k floats, v head_dim_v (ignored with values_in_keys).
  void store_head(int64_t layer, int64_t seq, int64_t pos, int64_t head, const float* k, const float* v);
  // Rows of consecutive positions of one head of one sequence: position p is at row + p * stride elements.
  const void* k_rows(int64_t layer, int64_t seq, int64_t head) const {
    return slot(k_.get(), layer, seq, head, 0, dim_k_);
  }
  const void* v_rows(int64_t layer, int64_t seq, int64_t head) const {
    return values_in_keys_ ? k_rows(layer, seq, head) : slot(v_.get(), layer, seq, head, 0, dim_v_);
  }
  int64_t k_stride() const { return dim_k_; }
  int64_t v_stride() const { return values_in_keys_ ? dim_k_ : dim_v_; }

 private:
  uint8_t* slot(uint8_t* base, int64_t layer, int64_t seq, int64_t head, int64_t pos, int64_t dim) const {
    return base + size_t((((layer * n_seq_ + seq) * n_head_ + head) * n_ctx_ + pos) * dim) * elem_;
  }
  // Bytes of keys (or values) per head dimension: every layer, sequence, head and position.
  size_t bytes_per_dim() const { return size_t(n_layer_ * n_seq_ * n_head_ * n_ctx_) * elem_; }
  int64_t n_layer_, n_seq_, n_ctx_, n_head_, dim_k_, dim_v_;
  DType type_;
  bool values_in_keys_;
  size_t elem_;
  size_t bytes_;
  std::shared_ptr<uint8_t[]> k_, v_;  // core/huge_pages.h
};

}  // namespace shardlm
