// shardlm synth: a random-weight GGUF of a real model's shapes (dense, MoE, MLA), written in
// row blocks so multi-GB outputs never sit in memory. Every row's values depend
// only on (seed, tensor, row), so the file is the same for any thread count.
#include <fmt/format.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

#include "cli/commands.h"
#include "cli/synth.h"
#include "cli/usage.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "gguf/file_type.h"
#include "gguf/gguf.h"

namespace shardlm::cli {
namespace {

struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;  // ne0 first
  DType type;
  float mean, stddev;
};

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Approximately normal values: a sum of four uniforms (Irwin-Hall) rescaled to
// unit variance, from one 64-bit hash per value; cheap enough for 8B weights.
void fill_row(float* dst, int64_t n, uint64_t row_seed, float mean, float stddev) {
  const float scale = stddev * std::sqrt(3.0f) / 65536.0f;  // Var(sum of 4 U[0,65536)) = 65536²/3
  uint64_t s = row_seed;
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t r = mix(s += 0x9E3779B97F4A7C15ull);
    const int32_t sum = int32_t(r & 0xFFFF) + int32_t((r >> 16) & 0xFFFF) + int32_t((r >> 32) & 0xFFFF) +
                        int32_t(r >> 48) - 2 * 65536;
    dst[i] = mean + float(sum) * scale;
  }
}

// The requested type where the row length allows it, else Q8_0 (or F16) with
// a notice, as llama-quantize falls back.
DType matrix_type(DType want, int64_t ne0, const std::string& name, std::set<std::string>& noticed) {
  if (ne0 % traits(want).block_elems == 0) return want;
  const DType fallback = ne0 % QK8_0 == 0 ? DType::Q8_0 : DType::F16;
  const std::string note = fmt::format("{} rows of {}", dtype_name(want), ne0);
  if (noticed.insert(note).second)
    fmt::print(stderr, "synth: notice: {} ({} values per row) is not a multiple of the {} block; using {}\n", name,
               ne0, dtype_name(want), dtype_name(fallback));
  return fallback;
}

// llama-quantize's Q4_K_M recipe: Q6_K for the output matrix (the token
// embedding when it is tied) and for attn_v / ffn_down in the first and last
// eighth of the layers and every third layer between; Q4_K elsewhere.
DType q4_k_m_type(const std::string& name, int64_t n_layer, bool tied_embeddings) {
  if (name == "output.weight" || (tied_embeddings && name == "token_embd.weight")) return DType::Q6_K;
  int64_t layer = -1;
  if (std::sscanf(name.c_str(), "blk.%" SCNd64 ".", &layer) != 1) return DType::Q4_K;
  const bool more_bits =
      layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
  const bool sensitive = name.ends_with(".attn_v.weight") || name.ends_with(".ffn_down.weight") ||
                         name.ends_with(".ffn_down_exps.weight");
  return more_bits && sensitive ? DType::Q6_K : DType::Q4_K;
}

class TensorPlanner {
 public:
  TensorPlanner(const synth::Preset& p, DType want, bool q4_k_m) : p_(p), want_(want), q4_k_m_(q4_k_m) {}

  std::vector<TensorPlan> plan(int64_t n_vocab) {
    matrix("token_embd.weight", p_.n_embd, n_vocab, kStd);
    for (int64_t l = 0; l < p_.n_layer; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      norm(b + "attn_norm.weight", p_.n_embd);
      if (p_.mla.kv_lora > 0)
        latent_attention(b);
      else
        attention(b);
      norm(b + "ffn_norm.weight", p_.n_embd);
      if (p_.moe.n_expert > 0 && l >= p_.moe.n_leading_dense)
        experts(b);
      else
        ffn(b, "", p_.n_ff);
    }
    norm("output_norm.weight", p_.n_embd);
    if (!p_.tied_embeddings) matrix("output.weight", p_.n_embd, n_vocab, kStd);
    return std::move(t_);
  }

 private:
  static constexpr float kStd = 0.02f;
  float out_proj() const { return kStd / std::sqrt(2.0f * float(p_.n_layer)); }

  void matrix(std::string name, int64_t ne0, int64_t ne1, float stddev, int64_t ne2 = 1) {
    std::vector<int64_t> shape{ne0, ne1};
    if (ne2 > 1) shape.push_back(ne2);
    const DType want = q4_k_m_ ? q4_k_m_type(name, p_.n_layer, p_.tied_embeddings) : want_;
    const DType type = matrix_type(want, ne0, name, noticed_);
    t_.push_back({std::move(name), shape, type, 0.0f, stddev});
  }
  void norm(std::string name, int64_t n) { t_.push_back({std::move(name), {n}, DType::F32, 1.0f, 0.02f}); }

  void attention(const std::string& b) {
    const int64_t q_dim = p_.n_head * p_.head_dim, kv_dim = p_.n_head_kv * p_.head_dim;
    matrix(b + "attn_q.weight", p_.n_embd, q_dim, kStd);
    matrix(b + "attn_k.weight", p_.n_embd, kv_dim, kStd);
    matrix(b + "attn_v.weight", p_.n_embd, kv_dim, kStd);
    if (p_.qk_norm) {
      norm(b + "attn_q_norm.weight", p_.head_dim);
      norm(b + "attn_k_norm.weight", p_.head_dim);
    }
    matrix(b + "attn_output.weight", q_dim, p_.n_embd, out_proj());
  }

  void latent_attention(const std::string& b) {
    const auto& a = p_.mla;
    const int64_t qk = a.qk_nope + a.qk_rope;
    if (a.q_lora > 0) {
      matrix(b + "attn_q_a.weight", p_.n_embd, a.q_lora, kStd);
      norm(b + "attn_q_a_norm.weight", a.q_lora);
      matrix(b + "attn_q_b.weight", a.q_lora, p_.n_head * qk, kStd);
    } else {
      matrix(b + "attn_q.weight", p_.n_embd, p_.n_head * qk, kStd);
    }
    matrix(b + "attn_kv_a_mqa.weight", p_.n_embd, a.kv_lora + a.qk_rope, kStd);
    norm(b + "attn_kv_a_norm.weight", a.kv_lora);
    // The latent is RMS-normed, so these up-projections see unit-size inputs.
    const float up = 1.0f / std::sqrt(float(a.kv_lora));
    if (a.joined_kv_b) {
      matrix(b + "attn_kv_b.weight", a.kv_lora, p_.n_head * (a.qk_nope + a.v_dim), up);
    } else {
      matrix(b + "attn_k_b.weight", a.qk_nope, a.kv_lora, up, p_.n_head);
      matrix(b + "attn_v_b.weight", a.kv_lora, a.v_dim, up, p_.n_head);
    }
    matrix(b + "attn_output.weight", p_.n_head * a.v_dim, p_.n_embd, out_proj());
  }

  void ffn(const std::string& b, const std::string& suffix, int64_t rows, int64_t n = 1) {
    matrix(b + "ffn_gate" + suffix + ".weight", p_.n_embd, rows, kStd, n);
    matrix(b + "ffn_up" + suffix + ".weight", p_.n_embd, rows, kStd, n);
    matrix(b + "ffn_down" + suffix + ".weight", rows, p_.n_embd, out_proj(), n);
  }

  void experts(const std::string& b) {
    const auto& m = p_.moe;
    // Router logits of a few units, so that the choice is not a near tie
    // everywhere. F32 whatever the other matrices are, as in the GGUFs
    // people run: the converters write routers in F32 and llama-quantize
    // leaves them so.
    t_.push_back({b + "ffn_gate_inp.weight", {p_.n_embd, m.n_expert}, DType::F32, 0.0f, 0.2f});
    if (m.selection_bias) t_.push_back({b + "exp_probs_b.bias", {m.n_expert}, DType::F32, 0.0f, 0.05f});
    ffn(b, "_exps", m.n_ff_expert, m.n_expert);
    if (m.n_shared > 0) ffn(b, "_shexp", m.n_shared * m.n_ff_expert);
  }

  const synth::Preset& p_;
  DType want_;
  bool q4_k_m_;
  std::set<std::string> noticed_;
  std::vector<TensorPlan> t_;
};

void set_hyperparameters(gguf::Writer& w, const synth::Preset& p, int64_t n_vocab, uint32_t file_type, bool quantized) {
  const std::string a = p.arch + ".";
  w.set("general.architecture", p.arch);
  w.set("general.name", "synthetic " + p.name);
  w.set("general.description", std::string("random weights from shardlm synth (not a trained model)"));
  w.set("general.file_type", file_type);
  if (quantized) w.set("general.quantization_version", uint32_t(2));
  w.set(a + "context_length", uint32_t(p.n_ctx));
  w.set(a + "embedding_length", uint32_t(p.n_embd));
  w.set(a + "block_count", uint32_t(p.n_layer));
  w.set(a + "feed_forward_length", uint32_t(p.n_ff));
  w.set(a + "attention.head_count", uint32_t(p.n_head));
  const auto& mla = p.mla;
  if (mla.kv_lora > 0) {
    // As current converters write it: the cache as one MQA head (latent + rope
    // key), per-head sizes in the *_mla keys; older files had per-head sizes only.
    if (mla.joined_kv_b) {
      w.set(a + "attention.head_count_kv", uint32_t(p.n_head));
      w.set(a + "attention.key_length", uint32_t(mla.qk_nope + mla.qk_rope));
      w.set(a + "attention.value_length", uint32_t(mla.v_dim));
    } else {
      w.set(a + "attention.head_count_kv", uint32_t(1));
      w.set(a + "attention.key_length", uint32_t(mla.kv_lora + mla.qk_rope));
      w.set(a + "attention.value_length", uint32_t(mla.kv_lora));
      w.set(a + "attention.key_length_mla", uint32_t(mla.qk_nope + mla.qk_rope));
      w.set(a + "attention.value_length_mla", uint32_t(mla.v_dim));
    }
    if (mla.q_lora > 0) w.set(a + "attention.q_lora_rank", uint32_t(mla.q_lora));
    w.set(a + "attention.kv_lora_rank", uint32_t(mla.kv_lora));
    w.set(a + "rope.dimension_count", uint32_t(mla.qk_rope));
  } else {
    w.set(a + "attention.head_count_kv", uint32_t(p.n_head_kv));
    if (p.head_dim * p.n_head != p.n_embd) {
      w.set(a + "attention.key_length", uint32_t(p.head_dim));
      w.set(a + "attention.value_length", uint32_t(p.head_dim));
    }
    w.set(a + "rope.dimension_count", uint32_t(p.head_dim));
  }
  w.set(a + "rope.freq_base", float(p.rope_base));
  w.set(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  w.set(a + "vocab_size", uint32_t(n_vocab));
  if (p.yarn.factor > 0) {
    w.set(a + "rope.scaling.type", std::string("yarn"));
    w.set(a + "rope.scaling.factor", float(p.yarn.factor));
    w.set(a + "rope.scaling.original_context_length", uint32_t(p.yarn.orig_ctx));
    w.set(a + "rope.scaling.yarn_log_multiplier", p.yarn.log_multiplier);
  }
  const auto& m = p.moe;
  if (m.n_expert == 0) return;
  w.set(a + "expert_count", uint32_t(m.n_expert));
  w.set(a + "expert_used_count", uint32_t(m.n_used));
  if (m.n_ff_expert != p.n_ff || p.arch != "llama") w.set(a + "expert_feed_forward_length", uint32_t(m.n_ff_expert));
  if (m.n_shared > 0) w.set(a + "expert_shared_count", uint32_t(m.n_shared));
  if (m.n_leading_dense > 0) w.set(a + "leading_dense_block_count", uint32_t(m.n_leading_dense));
  if (m.n_group > 0) {
    w.set(a + "expert_group_count", uint32_t(m.n_group));
    w.set(a + "expert_group_used_count", uint32_t(m.n_group_used));
  }
  if (m.gating_func > 0) w.set(a + "expert_gating_func", m.gating_func);
  if (p.arch != "llama") w.set(a + "expert_weights_norm", m.weights_norm);
  if (m.weights_scale > 0) w.set(a + "expert_weights_scale", m.weights_scale);
}

// The preset, cut to --layers.
synth::Preset chosen_preset(const synth::Options& o) {
  synth::Preset preset;
  try {
    preset = synth::find_preset(o.preset);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (o.layers != 0) {
    if (o.layers < 1 || o.layers > preset.n_layer)
      throw UsageError(fmt::format("--layers: {} is not in [1, {}] (the layers of {})", o.layers, preset.n_layer,
                                   preset.name));
    preset.n_layer = o.layers;
    preset.moe.n_leading_dense = std::min(preset.moe.n_leading_dense, o.layers);
  }
  return preset;
}

int64_t tensor_rows(const TensorPlan& t) {
  int64_t rows = 1;
  for (size_t d = 1; d < t.shape.size(); ++d) rows *= t.shape[d];
  return rows;
}

struct WeightTotals {
  uint64_t bytes = 0, params = 0;
};

WeightTotals add_tensors(gguf::Writer& w, const std::vector<TensorPlan>& plan) {
  WeightTotals totals;
  for (const auto& t : plan) {
    w.add_tensor(t.name, t.type, t.shape);
    const int64_t rows = tensor_rows(t);
    totals.bytes += uint64_t(rows) * row_bytes(t.type, t.shape[0]);
    totals.params += uint64_t(rows * t.shape[0]);
  }
  return totals;
}

// Random rows, quantized in blocks of ~16 MB of floats on the pool; a row's
// values depend only on the seed, the tensor's index and the row, so the file
// is the same for any thread count.
void write_weights(gguf::Writer& w, const std::vector<TensorPlan>& plan, const synth::Options& o,
                   uint64_t total_bytes) {
  ThreadPool pool(o.threads);
  std::vector<uint8_t> out;
  uint64_t written = 0;
  int reported = 0;
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const auto& t = plan[ti];
    const int64_t ne0 = t.shape[0];
    const int64_t rows = tensor_rows(t);
    const size_t row = row_bytes(t.type, ne0);
    const int64_t block_rows = std::max<int64_t>(1, (int64_t(1) << 22) / ne0);
    for (int64_t r0 = 0; r0 < rows; r0 += block_rows) {
      const int64_t n = std::min(block_rows, rows - r0);
      out.resize(size_t(n) * row);
      pool.run([&](int ith, int nth) {
        std::vector<float> values(static_cast<size_t>(ne0));
        for (int64_t r = ith; r < n; r += nth) {
          fill_row(values.data(), ne0, mix(o.seed * 0x100000001B3ull ^ mix(ti + 1) ^ uint64_t(r0 + r)), t.mean,
                   t.stddev);
          quantize_row(t.type, values.data(), out.data() + size_t(r) * row, ne0);
        }
      });
      w.write_tensor_data(t.name, out.data(), out.size());
      written += out.size();
      const int pct = int(written * 100 / std::max<uint64_t>(total_bytes, 1));
      if (total_bytes > (uint64_t(64) << 20) && pct / 10 > reported / 10) {
        reported = pct;
        fmt::print(stderr, "synth: {:3}% ({} of {} MiB)\n", pct, written >> 20, total_bytes >> 20);
      }
    }
  }
}

}  // namespace

void synth::write_model(const synth::Options& o) {
  const synth::Preset preset = chosen_preset(o);
  const bool q4_k_m = o.type == "q4_k_m" || o.type == "Q4_K_M";
  const auto want = q4_k_m ? std::optional(DType::Q4_K) : dtype_from_name(o.type);
  const auto file_type = want ? gguf::file_type_for(*want) : std::nullopt;
  if (!file_type)
    throw UsageError(fmt::format("--type: '{}' is not one of f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                                 "q2_k, q3_k, q4_k, q4_k_m, q5_k, q6_k", o.type));
  const auto start = SteadyClock::now();

  gguf::Writer w(o.output);
  int64_t n_vocab = preset.n_vocab;
  std::unique_ptr<gguf::File> vocab_file;
  if (!o.vocab_from.empty()) vocab_file = gguf::File::open(o.vocab_from);
  const bool quantized = traits(*want).block_elems > 1;
  // Hyper-parameters first so the file reads like a converted model; the
  // vocabulary size is only known once a copied vocabulary is read.
  if (vocab_file) n_vocab = int64_t(vocab_file->require_array("tokenizer.ggml.tokens").items.size());
  set_hyperparameters(w, preset, n_vocab, *file_type, quantized);
  if (vocab_file) synth::copy_vocab(w, *vocab_file);
  else synth::set_generated_vocab(w, preset, n_vocab, o.seed);

  const auto plan = TensorPlanner(preset, *want, q4_k_m).plan(n_vocab);
  const WeightTotals totals = add_tensors(w, plan);
  w.begin_data();
  if (!o.weights) {
    w.skip_remaining_data();
    w.finish();
    return;
  }
  write_weights(w, plan, o, totals.bytes);
  w.finish();
  const double seconds = seconds_since(start);
  fmt::print("synth: wrote {} ({} {}, {} tensors, {} parameters, {} bytes of weights) in {:.1f} s\n", o.output,
             preset.name, dtype_name(*want), plan.size(), totals.params, totals.bytes, seconds);
}

void add_synth(CLI::App& app) {
  auto o = std::make_shared<synth::Options>();
  auto* cmd = app.add_subcommand("synth", "write a random-weight GGUF with a real model's shapes");
  cmd->add_option("--preset", o->preset, "model shape: " + synth::preset_names())->required();
  cmd->add_option("--type", o->type, "weight type of the matrices (f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m (llama-quantize's mix), ...)")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "output .gguf file")->required();
  cmd->add_option("--vocab-from", o->vocab_from, "copy the tokenizer.* metadata of this GGUF");
  cmd->add_option("--seed", o->seed, "random seed")
      ->capture_default_str()
      ->check(integer_in(0, std::numeric_limits<int64_t>::max()));
  cmd->add_option("--layers", o->layers, "keep only the first N layers (the real per-layer shape in less memory)")
      ->check(integer_in(1, 1 << 16));
  cmd->add_option("-t,--threads", o->threads, "quantization threads")->capture_default_str()->check(integer_in(1, 256));
  cmd->add_flag("--no-weights", [o](int64_t) { o->weights = false; },
                "leave the weights a hole: a file of the full size that takes no disk (for `plan`)");
  cmd->callback([o] { synth::write_model(*o); });
}

}  // namespace shardlm::cli
