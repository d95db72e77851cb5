// Multi-head latent attention (DeepSeek-V2/V3) in the absorbed form: the cache
// holds per token only the normed latent c (kv_lora_rank) and the shared roped
// key k_pe. Each head's query is taken into the latent space once,
// q_lat = k_b_h · q_nope, so that q_nope · k_nope = q_lat · c, and its output
// is taken out of it once, v_b_h · (Σ_p a_p c_p): no per-position K or V is
// ever formed, for prompts as for decode.
//
// Under tensor parallel a rank holds a range of heads (their rows of q_b,
// their k_b / v_b, their columns of attn_output). The latent and its cache are
// computed by every rank and replicated: they are one row per token shared by
// all heads, so splitting them would need an all-gather in every layer, while
// kv_a_mqa is a small matrix (kv_lora_rank + rope rows) and the cache row is
// already compressed.
#include <cmath>
#include <cstring>

#include "core/matmul.h"
#include "core/ops.h"
#include "model/model.h"

namespace shardlm {

void Model::latent_attention(int64_t l, const Batch& batch) {
  const auto& c = config_;
  const auto& s = c.attention.latent;
  const auto& A = weights_.layers[size_t(l)].latent;
  const int64_t n = n_tokens_, qk = s.qk_dim(), row = c.head_dim_k, lora = s.kv_lora_rank;

  PreparedInput normed(xn_.data(), n, c.n_embd, token_sums());  // quantized once for Q and the latent
  if (A.wq_a.data) {
    matmul(A.wq_a, normed, q_lora_.data(), opt_.pool);
    for (int64_t t = 0; t < n; ++t) {
      float* q = &q_lora_[size_t(t * s.q_lora_rank)];
      ops::rms_norm(q, A.q_a_norm, s.q_lora_rank, c.rms_eps, q);
    }
    matmul(A.wq, q_lora_.data(), n, q_.data(), opt_.pool, nullptr, token_sums());
  } else {
    matmul(A.wq, normed, q_.data(), opt_.pool);
  }
  matmul(A.wkv_a, normed, kv_latent_.data(), opt_.pool);

  // RoPE turns the last qk_rope_dim values of every query head and of the shared key.
  const auto rp = rope_params(int(qk));
  const auto rp_key = rope_params(int(s.qk_rope_dim));
  for (int64_t t = 0; t < n; ++t) {
    const auto& e = batch.entries[size_t(t)];
    float* kv = &kv_latent_[size_t(t * row)];
    ops::rms_norm(kv, A.kv_a_norm, lora, c.rms_eps, kv);
    ops::rope_rotate(kv + lora, 1, rp_key, rope_angles(t));
    ops::rope_rotate(&q_[size_t(t * n_head_ * qk) + size_t(s.qk_nope_dim)], int(n_head_), rp, rope_angles(t));
    kv_.store(l, e.seq, e.pos, kv, nullptr);
  }

  // Absorbed queries: [k_b_h · q_nope_h, q_pe_h] per head, one matmul per head over the batch.
  for (int64_t h = 0; h < n_head_; ++h) {
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(&head_in_[size_t(t * s.qk_nope_dim)], &q_[size_t((t * n_head_ + h) * qk)],
                  size_t(s.qk_nope_dim) * sizeof(float));
    matmul(A.k_b[size_t(h)], head_in_.data(), n, head_out_.data(), opt_.pool, nullptr, token_sums());
    for (int64_t t = 0; t < n; ++t) {
      float* dst = &q_absorbed_[size_t((t * n_head_ + h) * row)];
      std::memcpy(dst, &head_out_[size_t(t * lora)], size_t(lora) * sizeof(float));
      std::memcpy(dst + lora, &q_[size_t((t * n_head_ + h) * qk + s.qk_nope_dim)],
                  size_t(s.qk_rope_dim) * sizeof(float));
    }
  }

  // DeepSeek's YaRN scale mscale = attn_factor · (1 + log_multiplier · ln factor)
  // multiplies both q and k, so it enters the score scale squared.
  const auto& r = c.rope;
  const float mscale = r.yarn ? r.yarn_attn_factor * (1.0f + r.yarn_log_multiplier * std::log(1.0f / r.freq_scale))
                              : 1.0f;
  attend(l, batch, q_absorbed_.data(), out_latent_.data(), mscale * mscale / std::sqrt(float(qk)));

  // Out of the latent space: v_h = v_b_h · out_latent_h, into this rank's columns of attn_output.
  for (int64_t h = 0; h < n_head_; ++h) {
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(&head_in_[size_t(t * lora)], &out_latent_[size_t((t * n_head_ + h) * lora)],
                  size_t(lora) * sizeof(float));
    matmul(A.v_b[size_t(h)], head_in_.data(), n, head_out_.data(), opt_.pool, nullptr, token_sums());
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(&attn_[size_t((t * n_head_ + h) * s.v_dim)], &head_out_[size_t(t * s.v_dim)],
                  size_t(s.v_dim) * sizeof(float));
  }
}

}  // namespace shardlm
