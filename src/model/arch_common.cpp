#include "model/arch_common.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"

namespace shardlm::arch {

int64_t ArchKeys::require_count(std::string_view suffix) const {
  const std::string k = key(suffix);
  const uint64_t v = f_.require_u64(k);
  check_count(k, v);
  return int64_t(v);
}

int64_t ArchKeys::count_or(std::string_view suffix, int64_t fallback) const {
  const std::string k = key(suffix);
  const auto v = f_.get_u64(k);
  if (!v) return fallback;
  check_count(k, *v);
  return int64_t(*v);
}

int64_t ArchKeys::count_or_zero(std::string_view suffix) const {
  const auto v = f_.get_u64(key(suffix));
  if (!v || *v == 0) return 0;
  check_count(key(suffix), *v);
  return int64_t(*v);
}

double ArchKeys::real_or(std::string_view suffix, double fallback) const {
  return f_.get_f64(key(suffix)).value_or(fallback);
}

bool ArchKeys::flag_or(std::string_view suffix, bool fallback) const {
  return f_.get_bool(key(suffix)).value_or(fallback);
}

void ArchKeys::fail(std::string_view suffix, const std::string& what) const {
  throw Error(fmt::format("{}: metadata key '{}' {}", f_.path(), key(suffix), what));
}

void ArchKeys::check_count(const std::string& k, uint64_t v) const {
  // 2^24 is far above any real hyper-parameter and keeps products in range.
  if (v == 0 || v > (uint64_t(1) << 24))
    throw Error(fmt::format("{}: metadata key '{}' = {} is out of range", f_.path(), k, v));
}

namespace {

void read_rope_scaling(const ArchKeys& keys, ModelConfig& c) {
  const auto& f = keys.file();
  auto& r = c.rope;
  r.freq_base = float(keys.real_or("rope.freq_base", 10000.0));
  if (!(r.freq_base > 1.0f)) keys.fail("rope.freq_base", "must be greater than 1");
  const std::string scaling = f.get_string(keys.key("rope.scaling.type")).value_or("none");
  if (scaling == "none") return;
  if (scaling != "linear" && scaling != "yarn")
    throw Error(fmt::format("{}: unsupported RoPE scaling '{}' ({})", f.path(), scaling, keys.key("rope.scaling.type")));
  const double factor = keys.real_or("rope.scaling.factor", keys.real_or("rope.scale_linear", 1.0));
  if (!(factor >= 1.0 && factor < 1e6)) keys.fail("rope.scaling.factor", fmt::format("= {} is not in [1, 1e6)", factor));
  r.freq_scale = float(1.0 / factor);
  if (scaling == "linear") return;
  r.yarn = true;
  r.yarn_orig_ctx = keys.count_or("rope.scaling.original_context_length", c.n_ctx_train);
  r.yarn_beta_fast = float(keys.real_or("rope.scaling.yarn_beta_fast", 32.0));
  r.yarn_beta_slow = float(keys.real_or("rope.scaling.yarn_beta_slow", 1.0));
  r.yarn_attn_factor = float(keys.real_or("rope.scaling.attn_factor", 1.0));
  r.yarn_log_multiplier = float(keys.real_or("rope.scaling.yarn_log_multiplier", 0.0));
  if (!(r.yarn_beta_fast > 0 && r.yarn_beta_slow > 0 && r.yarn_attn_factor > 0))
    keys.fail("rope.scaling.yarn_beta_fast", "or yarn_beta_slow / attn_factor is not positive");
}

}  // namespace

void read_transformer(const ArchKeys& keys, ModelConfig& c) {
  const auto& f = keys.file();
  c.n_embd = keys.require_count("embedding_length");
  c.n_layer = keys.require_count("block_count");
  c.n_head = keys.require_count("attention.head_count");
  c.n_head_kv = keys.count_or("attention.head_count_kv", c.n_head);
  c.n_ff = keys.require_count("feed_forward_length");
  c.n_ctx_train = keys.count_or("context_length", 2048);
  c.rms_eps = float(f.require_f64(keys.key("attention.layer_norm_rms_epsilon")));
  if (c.n_head % c.n_head_kv != 0)
    throw Error(fmt::format("{}: {} = {} is not a multiple of {} = {}", f.path(), keys.key("attention.head_count"),
                            c.n_head, keys.key("attention.head_count_kv"), c.n_head_kv));
  if (c.n_embd % c.n_head != 0 && !f.has(keys.key("attention.key_length")))
    throw Error(fmt::format("{}: missing metadata key '{}' (n_embd {} is not a multiple of n_head {})", f.path(),
                            keys.key("attention.key_length"), c.n_embd, c.n_head));
  c.head_dim_k = keys.count_or("attention.key_length", c.n_embd / c.n_head);
  c.head_dim_v = keys.count_or("attention.value_length", c.head_dim_k);

  c.rope.dims = keys.count_or("rope.dimension_count", c.head_dim_k);
  if (c.rope.dims > c.head_dim_k || c.rope.dims % 2 != 0)
    throw Error(fmt::format("{}: {} = {} must be even and at most the head dimension {}", f.path(),
                            keys.key("rope.dimension_count"), c.rope.dims, c.head_dim_k));
  read_rope_scaling(keys, c);
  c.rope.has_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;

  const auto& embd = f.require_tensor("token_embd.weight");
  c.n_vocab = embd.ne[1];
  c.tied_output = f.find_tensor("output.weight") == nullptr;
}

void read_experts(const ArchKeys& keys, ModelConfig& c) {
  auto& m = c.moe;
  m.n_expert = keys.count_or_zero("expert_count");
  if (m.n_expert == 0) return;
  m.n_expert_used = keys.require_count("expert_used_count");
  if (m.n_expert_used > m.n_expert)
    keys.fail("expert_used_count", fmt::format("= {} exceeds expert_count {}", m.n_expert_used, m.n_expert));
  m.n_ff_expert = keys.count_or("expert_feed_forward_length", c.n_ff);
}

}  // namespace shardlm::arch
