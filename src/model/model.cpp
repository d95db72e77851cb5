#include "model/model.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/error.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"

namespace shardlm {

// Below this many multiply-adds, waking the pool costs more than it saves.
constexpr int64_t kParallelAttentionWork = 1 << 16;

namespace {

// The KV cache of one rank: latent attention caches one row per token (the
// latent and the shared roped key), whose first kv_lora_rank values are also
// the attended values.
KvCache make_kv_cache(const ModelConfig& c, const RankPlan& plan, DType type, int64_t n_seq, int64_t n_ctx) {
  const int64_t kv_heads = plan.kv_heads.size();
  return KvCache(plan.layers.size(), n_seq, n_ctx, kv_heads, c.head_dim_k, c.head_dim_v, type,
                 c.latent_attention());
}

}  // namespace

Model::Model(const gguf::File& file, ModelOptions options)
    : config_(ModelConfig::from_gguf(file)),
      opt_(std::move(options)),
      plan_(opt_.plan.value_or(RankPlan::whole(config_))),
      weights_(ModelWeights::map(file, config_, plan_, /*copy_vectors=*/true)),
      kv_(make_kv_cache(config_, plan_, opt_.kv_type, opt_.n_seq, opt_.n_ctx)) {
  const auto& c = config_;
  weights_.pack_column_slices();
  weights_.pack_panels(file, opt_.weights_in_memory);
  if (opt_.weights_in_memory) weights_.read_into_memory(file);
  weights_.release_unread_file_pages(file);
  if (opt_.time_kernels_at_load) {
    std::set<std::pair<DType, WeightLayout>> timed;
    weights_.for_each_matrix(1, [&](const MatrixView& m, double, bool) {
      if (timed.insert({m.type, m.layout}).second) time_kernel_choices(m);
    });
  }
  if (opt_.batch_invariant) warn_unless_batch_invariant();
  if (opt_.commit_kv_cache) kv_.commit_pages();
  if (opt_.n_batch < 1 || opt_.n_batch > 65536) throw Error(fmt::format("batch size {} is out of range", opt_.n_batch));
  if (opt_.n_outputs <= 0) opt_.n_outputs = opt_.n_seq;
  opt_.n_outputs = std::min(opt_.n_outputs, opt_.n_batch);
  n_threads_ = opt_.pool ? opt_.pool->size() : 1;
  n_head_ = plan_.heads.size();
  n_head_kv_ = plan_.kv_heads.size();
  n_ff_ = plan_.ff_rows.size();
  n_vocab_ = plan_.vocab_rows.size();

  const auto rows = [&](int64_t width) { return size_t(opt_.n_batch * width); };
  x_.resize(rows(c.n_embd));
  xn_.resize(rows(c.n_embd));
  proj_.resize(rows(c.n_embd));
  if (c.latent_attention()) {
    const auto& a = c.attention.latent;
    q_lora_.resize(rows(a.q_lora_rank));
    q_.resize(rows(n_head_ * a.qk_dim()));
    kv_latent_.resize(rows(c.head_dim_k));
    q_absorbed_.resize(rows(n_head_ * c.head_dim_k));
    out_latent_.resize(rows(n_head_ * c.head_dim_v));
    head_in_.resize(rows(std::max(a.qk_nope_dim, a.kv_lora_rank)));
    head_out_.resize(rows(std::max(a.kv_lora_rank, a.v_dim)));
    attn_.resize(rows(n_head_ * a.v_dim));
  } else {
    q_.resize(rows(n_head_ * c.head_dim_k));
    k_.resize(rows(n_head_kv_ * c.head_dim_k));
    v_.resize(rows(n_head_kv_ * c.head_dim_v));
    attn_.resize(rows(n_head_ * c.head_dim_v));
  }
  int64_t ff_width = n_ff_;
  if (c.has_experts()) {
    const auto& m = c.moe;
    router_.emplace(m);
    expert_load_.assign(size_t(plan_.layers.size() * m.n_expert), 0);
    router_logits_.resize(rows(m.n_expert));
    expert_ids_.resize(rows(m.n_expert_used));
    expert_weights_.resize(rows(m.n_expert_used));
    // Every token's chosen experts at once (model_experts.cpp), then the shared experts' output.
    expert_in_.resize(rows(m.n_expert_used * c.n_embd));
    expert_gate_.resize(rows(m.n_expert_used * m.n_ff_expert));
    expert_up_.resize(rows(m.n_expert_used * m.n_ff_expert));
    expert_out_.resize(rows((m.n_expert_used + 1) * c.n_embd));
    ff_width = std::max(ff_width, m.n_shared * m.n_ff_expert);
  }
  gate_.resize(rows(std::max(ff_width, plan_.ff_held.size())));
  up_.resize(rows(std::max(ff_width, plan_.ff_held.size())));
  if (opt_.hooks.rows) {
    ffn_act_.resize(rows(n_ff_));
    ffn_shipped_.resize(rows(std::max(n_ff_, plan_.ff_held.size() - n_ff_)));
  }
  rope_angles_.resize(rows(c.rope.dims));
  // Per thread: the scores of one KV head's query heads (at most a group).
  scores_.resize(size_t(n_threads_ * opt_.n_ctx * std::min(c.n_group(), n_head_)));
  if (plan_.last_stage(c)) {
    out_in_.resize(size_t(opt_.n_outputs * c.n_embd));
    logits_.resize(size_t(opt_.n_outputs * n_vocab_));
    if (opt_.hooks.rows) {
      vocab_shipped_.resize(size_t(opt_.n_outputs * std::max(n_vocab_, plan_.vocab_held.size() - n_vocab_)));
      vocab_scratch_.resize(size_t(opt_.n_outputs * n_vocab_));
    }
  }
}

// Only the 16-row panel kernels give a row the same bits for any number of
// tokens in a step (core/matmul.h); other matrices (F32/F16/BF16, row
// counts that are not multiples of 16) go a token at a time where they are
// small enough to stay in cache (TokenSums::AsOneToken), and the larger ones
// take other kernels from two tokens on.
void Model::warn_unless_batch_invariant() {
  int64_t uncovered = 0, all = 0;
  std::string example;
  weights_.for_each_matrix(1, [&](const MatrixView& m, double, bool) {
    ++all;
    if (same_bits_as_one_token(m)) return;
    if (uncovered++ == 0) example = fmt::format("{} {}x{}", dtype_name(m.type), m.rows, m.cols);
  });
  if (uncovered > 0)
    spdlog::warn("batch invariance: {} of {} weight matrices are neither in 16-row panels nor small enough to "
                 "multiply a token at a time (e.g. {}); their products can still differ with the number of tokens "
                 "in a step",
                 uncovered, all, example);
}

void Model::check(const Batch& batch, const float* hidden_in) const {
  if (batch.size() == 0) throw Error("forward: empty batch");
  if (int64_t(batch.size()) > opt_.n_batch)
    throw Error(fmt::format("forward: batch of {} entries exceeds the batch size {}", batch.size(), opt_.n_batch));
  if (plan_.first_stage() == (hidden_in != nullptr))
    throw Error("forward: the first stage takes tokens, later stages take hidden states");
  int64_t n_out = 0;
  for (const auto& e : batch.entries) {
    if (e.seq < 0 || e.seq >= opt_.n_seq)
      throw Error(fmt::format("forward: sequence {} is outside [0, {})", e.seq, opt_.n_seq));
    if (e.pos < 0 || e.pos >= opt_.n_ctx)
      throw Error(fmt::format("forward: position {} is outside the context of {} tokens", e.pos, opt_.n_ctx));
    if (plan_.first_stage() && (e.token < 0 || e.token >= config_.n_vocab))
      throw Error(fmt::format("forward: token id {} is outside the vocabulary of {}", e.token, config_.n_vocab));
    n_out += e.want_logits;
  }
  if (n_out > opt_.n_outputs)
    throw Error(fmt::format("forward: {} entries want logits, at most {} can", n_out, opt_.n_outputs));
}

void Model::forward(const Batch& batch, const float* hidden_in) {
  check(batch, hidden_in);
  n_tokens_ = int64_t(batch.size());
  n_out_ = 0;
  if (hidden_in)
    std::memcpy(x_.data(), hidden_in, size_t(n_tokens_ * config_.n_embd) * sizeof(float));
  else
    embed(batch);
  if (plan_.layers.size() > 0) compute_rope_angles(batch);
  for (int64_t l = 0; l < plan_.layers.size(); ++l) {
    attention_block(l, batch);
    ffn_block(l);
  }
  if (plan_.last_stage(config_)) compute_logits(batch);
}

void Model::embed(const Batch& batch) {
  const auto& E = weights_.token_embd;
  std::vector<uint8_t> row(E.layout == WeightLayout::Panels16 ? E.row_stride : 0);
  for (int64_t t = 0; t < n_tokens_; ++t) {
    const int64_t token = batch.entries[size_t(t)].token;
    const uint8_t* bytes = E.row(token);
    if (E.layout == WeightLayout::Panels16) {  // the tied output, repacked (ModelWeights::pack_panels)
      read_panel_row(E, token, row.data());
      bytes = row.data();
    }
    dequantize_row(E.type, bytes, &x_[size_t(t * config_.n_embd)], config_.n_embd);
  }
}

void Model::attention_block(int64_t l, const Batch& batch) {
  const auto& c = config_;
  const auto& L = weights_.layers[size_t(l)];
  const int64_t n = n_tokens_;
  for_each_token([&](int64_t t) {
    ops::rms_norm(&x_[size_t(t * c.n_embd)], L.attn_norm, c.n_embd, c.rms_eps, &xn_[size_t(t * c.n_embd)]);
  });
  if (c.latent_attention())
    latent_attention(l, batch);
  else
    multi_head_attention(l, batch);
  const bool dense = !c.layer_has_experts(plan_.layers.begin + l);
  matmul(L.wo, attn_.data(), n, proj_.data(), opt_.pool, dense ? &L.w_gate : nullptr, token_sums());
  all_reduce(proj_.data(), n * c.n_embd);
  add_residual();
}

void Model::add_residual() {
  const int64_t d = config_.n_embd;
  for_each_token([&](int64_t t) { ops::add(&x_[size_t(t * d)], &proj_[size_t(t * d)], &x_[size_t(t * d)], d); });
}

void Model::ffn_block(int64_t l) {
  const auto& c = config_;
  const auto& L = weights_.layers[size_t(l)];
  const int64_t n = n_tokens_;
  for_each_token([&](int64_t t) {
    ops::rms_norm(&x_[size_t(t * c.n_embd)], L.ffn_norm, c.n_embd, c.rms_eps, &xn_[size_t(t * c.n_embd)]);
  });
  if (c.layer_has_experts(plan_.layers.begin + l)) {
    expert_ffn(L);
    int32_t* load = &expert_load_[size_t(l * c.moe.n_expert)];
    std::fill(load, load + c.moe.n_expert, 0);
    for (int64_t i = 0; i < n * c.moe.n_expert_used; ++i) ++load[expert_ids_[size_t(i)]];
  } else {
    dense_ffn(L, first_matrix_after(l));
  }
  all_reduce(proj_.data(), n * c.n_embd);
  add_residual();
}

void Model::multi_head_attention(int64_t l, const Batch& batch) {
  const auto& c = config_;
  const auto& L = weights_.layers[size_t(l)];
  const int64_t n = n_tokens_, qd = n_head_ * c.head_dim_k, kd = n_head_kv_ * c.head_dim_k,
                vd = n_head_kv_ * c.head_dim_v;
  PreparedInput normed(xn_.data(), n, c.n_embd, token_sums());  // quantized once for Q, K and V
  const MatmulTarget qkv[] = {{&L.wq, q_.data()}, {&L.wk, k_.data()}, {&L.wv, v_.data()}};
  matmul_many(qkv, normed, opt_.pool, &L.wo);  // one job of the threads for the three
  const auto rp = rope_params(int(c.head_dim_k));
  for_each_token([&](int64_t t) {
    float *q = &q_[size_t(t * qd)], *k = &k_[size_t(t * kd)], *v = &v_[size_t(t * vd)];
    if (L.bq) {
      ops::add(q, L.bq, q, qd);
      ops::add(k, L.bk, k, kd);
      ops::add(v, L.bv, v, vd);
    }
    if (L.q_norm) {
      for (int64_t h = 0; h < n_head_; ++h)
        ops::rms_norm(q + h * c.head_dim_k, L.q_norm, c.head_dim_k, c.rms_eps, q + h * c.head_dim_k);
      for (int64_t h = 0; h < n_head_kv_; ++h)
        ops::rms_norm(k + h * c.head_dim_k, L.k_norm, c.head_dim_k, c.rms_eps, k + h * c.head_dim_k);
    }
    ops::rope_rotate(q, int(n_head_), rp, rope_angles(t));
    ops::rope_rotate(k, int(n_head_kv_), rp, rope_angles(t));
  });
  // Split by KV head, not by token: a batch naming one (sequence, position)
  // twice then still has one writer per slot, the later entry last.
  run_parallel(n > 1, [&](int ith, int nth) {
    for (int64_t h = ith; h < n_head_kv_; h += nth)
      for (int64_t t = 0; t < n; ++t) {
        const auto& e = batch.entries[size_t(t)];
        kv_.store_head(l, e.seq, e.pos, h, &k_[size_t(t * kd + h * c.head_dim_k)], &v_[size_t(t * vd + h * c.head_dim_v)]);
      }
  });
  attend(l, batch, q_.data(), attn_.data(), 1.0f / std::sqrt(float(c.head_dim_k)), &L.wo);
}

const MatrixView* Model::first_matrix_after(int64_t l) const {
  if (l + 1 < plan_.layers.size()) return config_.latent_attention() ? nullptr : &weights_.layers[size_t(l + 1)].wq;
  return plan_.last_stage(config_) ? &weights_.output : nullptr;
}

void Model::compute_rope_angles(const Batch& batch) {
  const auto rp = rope_params(/*head_dim=*/0);  // the angles do not depend on it
  for_each_token([&](int64_t t) {
    ops::rope_angles(rp, batch.entries[size_t(t)].pos, rope_angles_.data() + t * rp.n_rot);
  });
}

ops::RopeParams Model::rope_params(int head_dim) const {
  const auto& r = config_.rope;
  ops::RopeParams p;
  p.head_dim = head_dim;
  p.n_rot = int(r.dims);
  p.freq_base = r.freq_base;
  p.freq_scale = r.freq_scale;
  p.freq_factors = weights_.rope_freq_factors;
  p.style = r.style;
  if (r.yarn) {
    p.yarn = true;
    ops::yarn_correction_range(p.n_rot, r.yarn_orig_ctx, r.freq_base, r.yarn_beta_fast, r.yarn_beta_slow,
                               &p.yarn_corr_low, &p.yarn_corr_high);
    // YaRN's magnitude correction; latent attention moves it into its score scale instead.
    p.magnitude = config_.latent_attention() ? 1.0f
                                             : r.yarn_attn_factor * (1.0f + 0.1f * std::log(1.0f / r.freq_scale));
  }
  return p;
}

void Model::attend(int64_t l, const Batch& batch, const float* q, float* out, float scale, const MatrixView* then) {
  const auto& c = config_;
  const int64_t group = c.n_group();
  // Runs of this rank's query heads that share a KV head, attended together
  // so each cached row is read once for the run.
  auto kv_head = [&](int64_t h) { return (plan_.heads.begin + h) / group - plan_.kv_heads.begin; };
  std::vector<int64_t> run_begin;
  for (int64_t h = 0; h < n_head_; ++h)
    if (h == 0 || kv_head(h) != kv_head(h - 1)) run_begin.push_back(h);
  run_begin.push_back(n_head_);
  const int64_t n_runs = int64_t(run_begin.size()) - 1;
  // Consecutive positions of one sequence (a prompt) are attended as blocks
  // that read each cached row once (ops::attend_tokens).
  int64_t widest_run = 1;
  for (int64_t r = 0; r < n_runs; ++r) widest_run = std::max(widest_run, run_begin[size_t(r) + 1] - run_begin[size_t(r)]);
  const int64_t block_tokens = std::max<int64_t>(1, ops::kAttendLanes / widest_run);
  std::vector<int64_t> block_begin;
  for (int64_t t = 0; t < n_tokens_; ++t) {
    const auto& e = batch.entries[size_t(t)];
    const bool extends = !block_begin.empty() && t - block_begin.back() < block_tokens &&
                         e.seq == batch.entries[size_t(t) - 1].seq && e.pos == batch.entries[size_t(t) - 1].pos + 1;
    if (!extends) block_begin.push_back(t);
  }
  block_begin.push_back(n_tokens_);
  const int64_t n_blocks = int64_t(block_begin.size()) - 1;
  const int64_t n_tasks = n_blocks * n_runs;
  int64_t work = 0;  // multiply-adds, to keep short decode steps off the pool
  for (const auto& e : batch.entries) work += int64_t(e.pos + 1) * n_head_ * (c.head_dim_k + c.head_dim_v);
  // Whether a prompt's token is attended alone or in a block depends on how
  // the prompt was chunked, which under a server depends on the other
  // requests: batch invariance has single tokens add as a block's lanes do.
  const ops::SumOrder order = opt_.batch_invariant ? ops::SumOrder::AsBlocks : ops::SumOrder::Fastest;
  // Each (block, run) is independent, so any thread split gives the same bits.
  // Consecutive tasks of a thread attend one KV head, whose rows stay in cache.
  run_parallel(work >= kParallelAttentionWork, [&](int ith, int nth) {
    float* scores = &scores_[size_t(ith * opt_.n_ctx * std::min(group, n_head_))];
    for (int64_t task = ith; task < n_tasks; task += nth) {
      const int64_t r = task / n_blocks, blk = task % n_blocks;
      const int64_t t = block_begin[size_t(blk)], n_tok = block_begin[size_t(blk) + 1] - t;
      const int64_t h0 = run_begin[size_t(r)], n_q = run_begin[size_t(r) + 1] - h0;
      const auto& e = batch.entries[size_t(t)];
      const int64_t g = kv_head(h0);
      ops::KvHead head;
      head.k = kv_.k_rows(l, e.seq, g);
      head.v = kv_.v_rows(l, e.seq, g);
      head.k_stride = kv_.k_stride();
      head.v_stride = kv_.v_stride();
      head.dim_k = c.head_dim_k;
      head.dim_v = c.head_dim_v;
      head.f16 = kv_.type() == DType::F16;
      ops::attend_tokens(&q[size_t((t * n_head_ + h0) * c.head_dim_k)], n_head_ * c.head_dim_k, n_tok, n_q, head,
                         e.pos + 1, scale, scores, &out[size_t((t * n_head_ + h0) * c.head_dim_v)],
                         n_head_ * c.head_dim_v, order);
    }
  }, then);
}

void Model::compute_logits(const Batch& batch) {
  const auto& c = config_;
  n_out_ = 0;
  for (int64_t t = 0; t < n_tokens_; ++t) {
    if (!batch.entries[size_t(t)].want_logits) continue;
    ops::rms_norm(&x_[size_t(t * c.n_embd)], weights_.output_norm, c.n_embd, c.rms_eps, &out_in_[size_t(n_out_ * c.n_embd)]);
    ++n_out_;
  }
  // Then the next step's first matrix: the pool's idle threads fetch its start
  // while the caller samples and embeds the next token.
  if (n_out_ > 0)
    share_rows(SharedRows::Vocab, plan_.vocab_rows, plan_.vocab_held, n_out_, logits_.data(), vocab_shipped_.data(),
               [&](Range rows, float* dst, int64_t stride) { output_rows(rows, dst, stride, first_matrix_after(-1)); });
}

std::span<const float> Model::logits(size_t k) const {
  if (int64_t(k) >= n_out_) throw Error(fmt::format("logits: entry {} of {} with logits", k, n_out_));
  return {&logits_[k * size_t(n_vocab_)], size_t(n_vocab_)};
}

void Model::all_reduce(float* data, int64_t n) {
  if (opt_.hooks.all_reduce) opt_.hooks.all_reduce(data, size_t(n));
}

// A token's values come from one call on one thread, so the split changes no bit.
void Model::for_each_token(const std::function<void(int64_t t)>& fn) {
  run_parallel(n_tokens_ > 1, [&](int ith, int nth) {
    for (int64_t t = ith; t < n_tokens_; t += nth) fn(t);
  });
}

void Model::run_parallel(bool worth_it, const std::function<void(int, int)>& fn, const MatrixView* then) {
  if (worth_it && opt_.pool && n_threads_ > 1)
    opt_.pool->run(fn, matmul_prefetches(then, opt_.pool));
  else
    fn(0, 1);
}

}  // namespace shardlm
