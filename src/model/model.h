// The transformer forward pass of one rank (see model/plan.h), over a batch of
// (sequence, position, token) entries. Prompt processing (many positions of
// one sequence) and batched decoding (one position of many sequences) are the
// same call. Weights stay in the mapped file; the KV cache and the scratch
// buffers are allocated once, in the constructor.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "core/dtype.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "model/config.h"
#include "model/kv_cache.h"
#include "model/plan.h"
#include "model/router.h"
#include "model/weights.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::gguf { class File; }

namespace shardlm {

class ThreadPool;

struct BatchEntry {
  int32_t seq = 0;
  int32_t pos = 0;  // the position must follow positions 0..pos-1 of seq already in the cache or earlier in the batch
  TokenId token = 0;
  bool want_logits = false;
};

struct Batch {
  std::vector<BatchEntry> entries;
  void add(int32_t seq, int32_t pos, TokenId token, bool want_logits) {
    entries.push_back({seq, pos, token, want_logits});
  }
  size_t size() const { return entries.size(); }
  void clear() { entries.clear(); }
};

struct ModelOptions {
  int64_t n_ctx = 512;     // positions per sequence in the KV cache
  int64_t n_seq = 1;       // sequences decoded together
  int64_t n_batch = 512;   // most entries in one forward call
  int64_t n_outputs = 0;   // most entries wanting logits in one call (0: n_seq)
  DType kv_type = DType::F32;
  // The KV cache resident from the start (a server's memory is then known when
  // it starts and does not grow under load); otherwise pages are touched as
  // positions are first written.
  bool commit_kv_cache = false;
  // The weight matrices read into memory owned by the model at load
  // (ModelWeights::read_into_memory, llama.cpp's --no-mmap); false: read
  // from the file's mapping at every step (a model larger than memory).
  bool weights_in_memory = true;
  // Every kernel choice the matrices will meet timed at load
  // (time_kernel_choices, core/matmul.h) rather than on first use: for a
  // server's first requests and a benchmark's timed prompt.
  bool time_kernels_at_load = false;
  // A sequence's results independent of which other sequences share its
  // steps (a server's reproducible answers under load): single tokens are
  // attended in the blocked kernels' sum order (ops::SumOrder::AsBlocks),
  // which costs decode with a long cache (docs/BENCHMARKS.md). Covers
  // quantized weights in 16-row panels; F32/F16/BF16 matrices still give a
  // token other bits with 1-3 tokens in a step than with more.
  bool batch_invariant = false;
  ThreadPool* pool = nullptr;      // null: single thread
  std::optional<RankPlan> plan;    // null: the whole model
  ForwardHooks hooks;
};

class Model {
 public:
  // `file` must outlive the model: weights are read from its mapping.
  Model(const gguf::File& file, ModelOptions options);

  const ModelConfig& config() const { return config_; }
  const RankPlan& plan() const { return plan_; }
  const ModelWeights& weights() const { return weights_; }
  const KvCache& kv_cache() const { return kv_; }
  const ModelOptions& options() const { return opt_; }

  // First stage: embeds the batch's tokens (hidden_in must be null). Later
  // stages: hidden_in holds batch.size() × n_embd values from the previous stage.
  // Throws Error for an entry out of range (sequence, position, token, sizes).
  void forward(const Batch& batch, const float* hidden_in = nullptr);

  // After forward on the last stage: logits of the k-th entry that wanted them,
  // over this rank's vocabulary rows (plan().vocab_rows).
  std::span<const float> logits(size_t k) const;
  // After forward: batch.size() × n_embd hidden states for the next stage.
  std::span<const float> hidden() const { return {x_.data(), size_t(n_tokens_ * config_.n_embd)}; }
  // After forward: the (token, choice) pairs the router sent to each expert,
  // n_expert counts per layer of this stage (dense layers: zeros). Routing is
  // the same on every rank, so any rank can tell how the work fell on its group.
  std::span<const int32_t> expert_load() const { return expert_load_; }

 private:
  void check(const Batch& batch, const float* hidden_in) const;
  void warn_unless_batch_invariant();  // ModelOptions::batch_invariant: names matrices it does not cover
  // How products sum a token's values (ModelOptions::batch_invariant: as a one-token step would).
  TokenSums token_sums() const { return opt_.batch_invariant ? TokenSums::AsOneToken : TokenSums::Fastest; }
  void embed(const Batch& batch);
  // Each block: RMS norm of x_ into xn_, the block's product into proj_,
  // all-reduced over tensor-parallel ranks, added to x_.
  void attention_block(int64_t layer, const Batch& batch);
  void ffn_block(int64_t layer);
  // xn_ → attn_ (n × this rank's heads × v dim), the cache filled for the batch.
  void multi_head_attention(int64_t layer, const Batch& batch);
  void latent_attention(int64_t layer, const Batch& batch);   // model_latent_attention.cpp
  // xn_ → proj_; `then`: the matrix multiplied after w_down (see matmul).
  void dense_ffn(const LayerWeights& L, const MatrixView* then);  // model_shared_rows.cpp
  // model_shared_rows.cpp: own rows `own` of a product over n tokens into
  // out (n × own.size()), each row computed here or by the neighbour the
  // hooks say; compute(rows, dst, stride) writes rows' values of token t at
  // dst + t · stride. `shipped`: n × (the larger of own and held − own).
  void share_rows(SharedRows what, Range own, Range held, int64_t n, float* out, float* shipped,
                  const std::function<void(Range rows, float* dst, int64_t stride)>& compute);
  // SwiGLU of gate/up rows `rows` (of the held ones) for every token into
  // out[t · out_stride ...]; `then` as in matmul.
  void gated_rows(const LayerWeights& L, PreparedInput& x, Range rows, float* out, int64_t out_stride,
                  const MatrixView* then);
  // Logits of the output's rows `rows` (of the held ones) for every entry with logits.
  void output_rows(Range rows, float* dst, int64_t stride, const MatrixView* then);
  void expert_ffn(const LayerWeights& L);                     // model_experts.cpp
  ops::RopeParams rope_params(int head_dim) const;
  // Each token's rope angles (ops::rope_angles) into rope_angles_, once a step
  // for all its layers, queries and keys.
  void compute_rope_angles(const Batch& batch);
  const float* rope_angles(int64_t t) const { return rope_angles_.data() + t * config_.rope.dims; }
  // Attention of queries q (n × heads × head_dim_k) over the cached rows into
  // out (n × heads × head_dim_v); `then`: the matrix multiplied next.
  void attend(int64_t layer, const Batch& batch, const float* q, float* out, float scale,
              const MatrixView* then = nullptr);
  // The first matrix a step multiplies after layer `layer`'s FFN (the next
  // layer's query projection, or the output), where that is known; layer -1
  // names the step's first matrix.
  const MatrixView* first_matrix_after(int64_t layer) const;
  void all_reduce(float* data, int64_t n);
  void add_residual();  // x_ += proj_
  void compute_logits(const Batch& batch);
  void run_parallel(bool worth_it, const std::function<void(int ith, int nth)>& fn, const MatrixView* then = nullptr);
  // fn(t) for every token of the step, split over the pool by token when
  // there are several (one token alone is cheaper than a pool round).
  void for_each_token(const std::function<void(int64_t t)>& fn);

  ModelConfig config_;
  ModelOptions opt_;
  RankPlan plan_;
  ModelWeights weights_;
  KvCache kv_;
  int n_threads_ = 1;
  int64_t n_head_ = 0, n_head_kv_ = 0, n_ff_ = 0, n_vocab_ = 0;  // this rank's slices

  int64_t n_tokens_ = 0;
  int64_t n_out_ = 0;
  // Scratch, n_batch rows each.
  std::vector<float> x_, xn_, q_, k_, v_, attn_, proj_, gate_, up_;
  // With the rows hook: the activated own rows (n_batch × n_ff_), and the
  // rows sent to or received from a neighbour; the same for logits.
  std::vector<float> ffn_act_, ffn_shipped_, vocab_shipped_, vocab_scratch_;
  std::vector<float> scores_, out_in_, logits_, rope_angles_;
  // Latent attention: q-LoRA, latent + rope key, absorbed queries, latent outputs, one head's gathered rows.
  std::vector<float> q_lora_, kv_latent_, q_absorbed_, out_latent_, head_in_, head_out_;
  // Experts: router logits, choices, the chosen experts' gathered tokens and products (model_experts.cpp).
  std::vector<float> router_logits_, expert_weights_, expert_in_, expert_gate_, expert_up_, expert_out_;
  std::vector<int32_t> expert_ids_, expert_load_;
  std::optional<ExpertRouter> router_;
};

}  // namespace shardlm
