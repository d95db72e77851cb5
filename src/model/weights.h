// Zero-copy views of one rank's weights inside the mapped GGUF file. Every
// tensor's shape and type is checked once here, so the forward pass never
// reads outside a tensor.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/matmul.h"
#include "model/config.h"
#include "model/plan.h"

namespace shardlm::gguf { class File; }

namespace shardlm {

struct LayerWeights {
  const float* attn_norm = nullptr;                // [n_embd]
  MatrixView wq, wk, wv;                           // rows: this rank's heads
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2 biases, same slices
  const float *q_norm = nullptr, *k_norm = nullptr;         // qwen3, [head_dim_k]
  MatrixView wo;                                   // columns: this rank's heads
  const float* ffn_norm = nullptr;                 // [n_embd]
  MatrixView w_gate, w_up;                         // rows: this rank's FFN rows
  MatrixView w_down;                               // columns: this rank's FFN rows
};

struct ModelWeights {
  MatrixView token_embd;                // all rows: any rank may embed any token
  std::vector<LayerWeights> layers;     // plan.layers only
  const float* output_norm = nullptr;   // last stage only
  MatrixView output;                    // last stage: rows = plan.vocab_rows
  const float* rope_freq_factors = nullptr;  // [rope_dims / 2] or null

  // Throws Error("<path>: tensor '<name>' ...") for a missing tensor, a wrong
  // shape or a type this engine cannot compute with.
  static ModelWeights map(const gguf::File& file, const ModelConfig& c, const RankPlan& plan);

  // Bytes of weight matrices read to decode one token (the bandwidth bound's denominator).
  size_t matrix_bytes_per_token() const;

  // Copies the column-sliced matrices (wo and w_down of a tensor-parallel
  // rank) into contiguous rows owned here. Reading every other stretch of a
  // row makes the hardware prefetchers fetch the skipped stretches too, so a
  // strided half cost nearly as much as the whole matrix. Whole rows stay
  // views into the file. The copies are these matrices' share of the slice
  // (no more than the rank reads anyway); the file's pages behind them are
  // left to the page cache.
  void pack_column_slices();
  std::vector<std::shared_ptr<const uint8_t[]>> packed;  // owners of the copies
};

}  // namespace shardlm
