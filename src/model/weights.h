// Zero-copy views of one rank's weights inside the mapped GGUF file. Every
// tensor's shape and type is checked once here, so the forward pass never
// reads outside a tensor.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "core/matmul.h"
#include "model/config.h"
#include "model/plan.h"

namespace shardlm::gguf { class File; }

namespace shardlm {

// A rank's part of one 3-D tensor [cols, rows, n_expert]: the experts
// [first, first + count), of each the same rows (all of them, or a slice
// when tensor parallel splits every expert's ff rows). Expert e's rows start
// `row_step` rows after expert e-1's in the file.
struct ExpertStack {
  MatrixView all;  // from expert `first`'s first held row to the last expert's last held row
  int64_t first = 0;
  int64_t count = 0;
  int64_t rows_per_expert = 0;
  int64_t row_step = 0;
  MatrixView expert(int64_t e) const {
    MatrixView m = all;
    m.data = all.row((e - first) * row_step);
    m.rows = rows_per_expert;
    return m;
  }
  // The held experts' rows now back to back at `data`, each row whole.
  void hold_back_to_back(const void* data) {
    all.data = data;
    all.rows = count * rows_per_expert;
    all.row_stride = row_bytes(all.type, all.cols);
    row_step = rows_per_expert;
  }
};

// Multi-head latent attention (see AttentionSpec::Latent); per-head matrices
// for this rank's heads.
struct LatentAttentionWeights {
  MatrixView wq_a;                     // [n_embd → q_lora_rank], empty without q-LoRA
  const float* q_a_norm = nullptr;     // [q_lora_rank]
  MatrixView wq;                       // attn_q_b (or attn_q): → heads × (nope + rope)
  MatrixView wkv_a;                    // attn_kv_a_mqa: [n_embd → kv_lora_rank + rope]
  const float* kv_a_norm = nullptr;    // [kv_lora_rank]
  std::vector<MatrixView> k_b;         // per head: [qk_nope → kv_lora_rank], takes q_nope into the latent space
  std::vector<MatrixView> v_b;         // per head: [kv_lora_rank → v_dim]
};

struct ExpertWeights {
  MatrixView router;                    // ffn_gate_inp: [n_embd → n_expert]
  const float* selection_bias = nullptr;  // exp_probs_b [n_expert] or null
  ExpertStack gate, up, down;
  int64_t n_used = 0;                   // experts each token runs (for the bytes read per token)
  MatrixView shared_gate, shared_up, shared_down;  // data null without shared experts
};

struct LayerWeights {
  const float* attn_norm = nullptr;                // [n_embd]
  MatrixView wq, wk, wv;                           // rows: this rank's heads (multi-head attention)
  const float *bq = nullptr, *bk = nullptr, *bv = nullptr;  // qwen2 biases, same slices
  const float *q_norm = nullptr, *k_norm = nullptr;         // qwen3, [head_dim_k]
  LatentAttentionWeights latent;                   // latent attention only
  MatrixView wo;                                   // columns: this rank's heads
  const float* ffn_norm = nullptr;                 // [n_embd]
  MatrixView w_gate, w_up;                         // dense FFN, rows: this rank's held FFN rows (RankPlan::ff_held)
  MatrixView w_down;                               // columns: this rank's FFN rows
  ExpertWeights experts;                           // MoE layers only
};

struct ModelWeights {
  MatrixView token_embd;                // all rows: any rank may embed any token
  std::vector<LayerWeights> layers;     // plan.layers only
  const float* output_norm = nullptr;   // last stage only
  MatrixView output;                    // last stage: rows = plan.vocab_held
  const float* rope_freq_factors = nullptr;  // [rope_dims / 2] or null
  // Matrices the file does not hold in the form the forward pass reads
  // (attn_k_b made from an older file's attn_kv_b), and the copied 1-D
  // tensors (map's copy_vectors), owned here.
  std::vector<std::vector<float>> derived;
  // The share of the held gate/up rows that are this rank's own, which a
  // forward reads (the rest is a margin, RankPlan::ff_held).
  double own_ffn_share = 1;
  double own_vocab_share = 1;  // the same for the output's rows (RankPlan::vocab_held)

  // Throws Error("<path>: tensor '<name>' ...") for a missing tensor, a wrong
  // shape or a type this engine cannot compute with. With `copy_vectors`
  // the 1-D tensors (norms, biases) are copies owned here, not views: the
  // kernel maps a file's large folio (2 MiB here) whole on a fault, so a norm of a few
  // KiB read from the mapping keeps the 2 MiB of the file around it resident
  // in this process, for every norm of every layer (what a model runs with;
  // the planner, which only counts bytes, keeps views).
  static ModelWeights map(const gguf::File& file, const ModelConfig& c, const RankPlan& plan,
                          bool copy_vectors = false);

  // Every weight matrix with the share of it a forward step of `tokens`
  // tokens reads: 1, except a dense FFN's held gate/up rows and the output's
  // held rows (the own shares of them) and a rank's routed experts, of which the step is
  // expected to read 1 − (1 − n_used / n_expert)^tokens (tokens routed
  // uniformly and independently; one token: n_used of the n_expert).
  // `routed` marks those experts (whose reads depend on the routing).
  void for_each_matrix(int64_t tokens,
                       const std::function<void(const MatrixView&, double share, bool routed)>& fn) const;

  // Bytes of weight matrices read to decode one token (the bandwidth bound's
  // denominator): of the experts, only the n_expert_used chosen ones (a
  // rank holding a share of the experts reads that share of them).
  size_t matrix_bytes_per_token() const;
  // Bytes of all the weight matrices this rank maps (every expert it holds):
  // what they take in memory. The token embedding is not a matrix here.
  size_t matrix_bytes_resident() const;

  // Copies the column-sliced matrices (wo, w_down and the experts' down of a
  // tensor-parallel rank) into contiguous rows owned here. Reading every other stretch of a
  // row makes the hardware prefetchers fetch the skipped stretches too, so a
  // strided half cost nearly as much as the whole matrix. Whole rows stay
  // views into the file. The copies are these matrices' share of the slice
  // (no more than the rank reads anyway); the file's pages behind them are
  // left to the page cache.
  void pack_column_slices();
  // Repacks the dense matrices (the output, shared experts and latent
  // attention's projections too) that core's panel kernels take
  // (panels_pay: the quantized types, where AVX2 or AVX-512 VNNI runs) into
  // WeightLayout::Panels16 copies owned here: decode and batched decode then
  // stream one sequential panel per 16 rows instead of gathering them. With
  // `experts`, the routed expert stacks as well (their held rows back to
  // back, each expert whole groups of 16 rows); without (--mmap: a model
  // that may not fit in memory) they stay views into the file. Matrices in
  // `file`'s mapping are read with pread(2) in slices (see
  // read_into_memory), so their pages are never faulted into this process.
  void pack_panels(const gguf::File& file, bool experts);
  // Copies every matrix still read from `file`'s mapping (all but the token
  // embedding, whose rows are looked up one per token) into memory owned
  // here, on 2 MiB pages, compacting expert stacks to the rows this rank
  // holds: llama.cpp's --no-mmap. Streaming a matrix through the mapping
  // walks 4 KiB pages, and on some machines the page cache itself serves a
  // mapped file at a fraction of memory speed (a 1.2 GB Q8_0 file: 11 tok/s
  // mapped, 17 from a copy of the file, same kernels; docs/BENCHMARKS.md).
  // Reads with pread(2) (a copy from the page cache, without faulting the
  // mapping in); from the mapping where the file cannot be reopened. Without
  // a mapping of its own, nothing.
  void read_into_memory(const gguf::File& file);
  // Drops from this process every page of `file`'s mapping (gguf::File::open)
  // that no matrix still read from it covers: the header, the repacked
  // matrices, the pages faults brought in around them. For weights mapped
  // with copy_vectors (views of vectors would fault their pages back in).
  // They stay in the page cache. Without a mapping of its own, nothing.
  void release_unread_file_pages(const gguf::File& file) const;
  // Bytes of the copies owned here (packed and derived matrices): with the
  // file's pages this process maps, what the weights take in memory.
  size_t owned_bytes() const;

  struct OwnedCopy {
    std::shared_ptr<const uint8_t[]> data;
    size_t bytes = 0;
  };
  std::vector<OwnedCopy> packed;  // owners of the copies
};

}  // namespace shardlm
