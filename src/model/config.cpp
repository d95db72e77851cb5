#include "model/config.h"

#include <fmt/format.h>

#include "core/error.h"
#include "gguf/gguf.h"

namespace shardlm {
namespace {

// Reads "<arch>.<suffix>" keys and names the file and key in every error.
class ArchKeys {
 public:
  ArchKeys(const gguf::File& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  int64_t require_count(std::string_view suffix) const {
    const std::string k = key(suffix);
    const uint64_t v = f_.require_u64(k);
    check_count(k, v);
    return int64_t(v);
  }
  int64_t count_or(std::string_view suffix, int64_t fallback) const {
    const std::string k = key(suffix);
    const auto v = f_.get_u64(k);
    if (!v) return fallback;
    check_count(k, *v);
    return int64_t(*v);
  }
  double real_or(std::string_view suffix, double fallback) const {
    return f_.get_f64(key(suffix)).value_or(fallback);
  }

 private:
  void check_count(const std::string& k, uint64_t v) const {
    // 2^24 is far above any real hyper-parameter and keeps products in range.
    if (v == 0 || v > (uint64_t(1) << 24))
      throw Error(fmt::format("{}: metadata key '{}' = {} is out of range", f_.path(), k, v));
  }
  const gguf::File& f_;
  std::string arch_;
};

}  // namespace

ModelConfig ModelConfig::from_gguf(const gguf::File& f) {
  ModelConfig c;
  c.arch_name = f.require_string("general.architecture");
  if (c.arch_name == "llama") {
    c.arch = Arch::Llama;
    c.rope_style = RopeStyle::AdjacentPairs;
  } else if (c.arch_name == "qwen2") {
    c.arch = Arch::Qwen2;
    c.rope_style = RopeStyle::NeoxHalves;
    c.has_qkv_bias = true;
  } else if (c.arch_name == "qwen3") {
    c.arch = Arch::Qwen3;
    c.rope_style = RopeStyle::NeoxHalves;
    c.has_qk_norm = true;
  } else {
    throw Error(fmt::format("{}: unsupported architecture '{}' (general.architecture); supported: llama, qwen2, qwen3",
                            f.path(), c.arch_name));
  }
  const ArchKeys keys(f, c.arch_name);
  if (const auto experts = f.get_u64(keys.key("expert_count")); experts && *experts > 0)
    throw Error(fmt::format("{}: mixture-of-experts models are not supported ({} = {})", f.path(),
                            keys.key("expert_count"), *experts));

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

  c.rope_dims = keys.count_or("rope.dimension_count", c.head_dim_k);
  if (c.rope_dims > c.head_dim_k || c.rope_dims % 2 != 0)
    throw Error(fmt::format("{}: {} = {} must be even and at most the head dimension {}", f.path(),
                            keys.key("rope.dimension_count"), c.rope_dims, c.head_dim_k));
  c.rope_freq_base = float(keys.real_or("rope.freq_base", 10000.0));
  const std::string scaling = f.get_string(keys.key("rope.scaling.type")).value_or("none");
  if (scaling == "linear") {
    const double factor = keys.real_or("rope.scaling.factor", keys.real_or("rope.scale_linear", 1.0));
    if (!(factor > 0))
      throw Error(fmt::format("{}: {} must be positive", f.path(), keys.key("rope.scaling.factor")));
    c.rope_freq_scale = float(1.0 / factor);
  } else if (scaling != "none") {
    throw Error(fmt::format("{}: unsupported RoPE scaling '{}' ({})", f.path(), scaling,
                            keys.key("rope.scaling.type")));
  }
  c.rope_has_freq_factors = f.find_tensor("rope_freqs.weight") != nullptr;

  const auto& embd = f.require_tensor("token_embd.weight");
  c.n_vocab = embd.ne[1];
  c.tied_output = f.find_tensor("output.weight") == nullptr;
  return c;
}

std::string ModelConfig::summary() const {
  return fmt::format(
      "{}: {} layers, n_embd {}, heads {}/{} (head_dim {}), n_ff {}, vocab {}, rope {} dims base {}{}{}", arch_name,
      n_layer, n_embd, n_head, n_head_kv, head_dim_k, n_ff, n_vocab, rope_dims, rope_freq_base,
      rope_style == RopeStyle::NeoxHalves ? " neox" : "", tied_output ? ", tied output" : "");
}

}  // namespace shardlm
