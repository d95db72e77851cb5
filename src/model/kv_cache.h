// Keys and values of every position already seen, per layer and sequence,
// stored as F32 or F16. Sized once for --ctx × n_seq: never the model's
// training context, which can be 128k. With values_in_keys (latent attention)
// only key rows are stored and a position's value is the first v_dim elements
// of its key row.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/dtype.h"

namespace shardlm {

class KvCache {
 public:
  // Throws Error for a type other than F32/F16 or a size that does not fit in memory.
  KvCache(int64_t n_layer, int64_t n_seq, int64_t n_ctx, int64_t k_dim, int64_t v_dim, DType type,
          bool values_in_keys = false);

  DType type() const { return type_; }
  int64_t n_ctx() const { return n_ctx_; }
  int64_t n_seq() const { return n_seq_; }
  size_t bytes() const { return bytes_; }

  // Converts k_dim / v_dim floats into the slot of (layer, seq, pos); v is
  // ignored with values_in_keys.
  void store(int64_t layer, int64_t seq, int64_t pos, const float* k, const float* v);
  // Rows of consecutive positions of one sequence: position p is at row + p * stride elements.
  const void* k_rows(int64_t layer, int64_t seq) const { return slot(k_.get(), layer, seq, 0, k_dim_); }
  const void* v_rows(int64_t layer, int64_t seq) const {
    return values_in_keys_ ? k_rows(layer, seq) : slot(v_.get(), layer, seq, 0, v_dim_);
  }
  int64_t k_stride() const { return k_dim_; }
  int64_t v_stride() const { return values_in_keys_ ? k_dim_ : v_dim_; }

 private:
  uint8_t* slot(uint8_t* base, int64_t layer, int64_t seq, int64_t pos, int64_t dim) const {
    return base + size_t(((layer * n_seq_ + seq) * n_ctx_ + pos) * dim) * elem_;
  }
  int64_t n_layer_, n_seq_, n_ctx_, k_dim_, v_dim_;
  DType type_;
  bool values_in_keys_;
  size_t elem_;
  size_t bytes_;
  std::unique_ptr<uint8_t[]> k_, v_;
};

}  // namespace shardlm
