// shardlm synth: a random-weight llama-family GGUF of real shapes, written in
// row blocks so multi-GB outputs never sit in memory. Every row's values depend
// only on (seed, tensor, row), so the file is the same for any thread count.
#include <fmt/format.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <set>

#include "cli/commands.h"
#include "cli/synth.h"
#include "core/error.h"
#include "core/quant.h"
#include "core/thread_pool.h"
#include "gguf/file_type.h"
#include "gguf/gguf.h"

namespace shardlm::cli {
namespace {

struct SynthOptions {
  std::string preset, type = "f16", output, vocab_from;
  uint64_t seed = 1;
  int threads = 2;
};

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
  const bool sensitive = name.ends_with(".attn_v.weight") || name.ends_with(".ffn_down.weight");
  return more_bits && sensitive ? DType::Q6_K : DType::Q4_K;
}

std::vector<TensorPlan> plan_tensors(const synth::Preset& p, int64_t n_vocab, DType want, bool q4_k_m) {
  std::set<std::string> noticed;
  const float w = 0.02f, out_proj = 0.02f / std::sqrt(2.0f * float(p.n_layer));
  const int64_t q_dim = p.n_head * p.head_dim, kv_dim = p.n_head_kv * p.head_dim;
  std::vector<TensorPlan> t;
  auto matrix = [&](std::string name, int64_t ne0, int64_t ne1, float stddev) {
    const DType type = q4_k_m ? q4_k_m_type(name, p.n_layer, p.tied_embeddings) : want;
    t.push_back({name, {ne0, ne1}, matrix_type(type, ne0, name, noticed), 0.0f, stddev});
  };
  auto norm = [&](std::string name, int64_t n) { t.push_back({std::move(name), {n}, DType::F32, 1.0f, 0.02f}); };
  matrix("token_embd.weight", p.n_embd, n_vocab, w);
  for (int64_t l = 0; l < p.n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    norm(b + "attn_norm.weight", p.n_embd);
    matrix(b + "attn_q.weight", p.n_embd, q_dim, w);
    matrix(b + "attn_k.weight", p.n_embd, kv_dim, w);
    matrix(b + "attn_v.weight", p.n_embd, kv_dim, w);
    if (p.qk_norm) {
      norm(b + "attn_q_norm.weight", p.head_dim);
      norm(b + "attn_k_norm.weight", p.head_dim);
    }
    matrix(b + "attn_output.weight", q_dim, p.n_embd, out_proj);
    norm(b + "ffn_norm.weight", p.n_embd);
    matrix(b + "ffn_gate.weight", p.n_embd, p.n_ff, w);
    matrix(b + "ffn_up.weight", p.n_embd, p.n_ff, w);
    matrix(b + "ffn_down.weight", p.n_ff, p.n_embd, out_proj);
  }
  norm("output_norm.weight", p.n_embd);
  if (!p.tied_embeddings) matrix("output.weight", p.n_embd, n_vocab, w);
  return t;
}

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
  w.set(a + "attention.head_count_kv", uint32_t(p.n_head_kv));
  if (p.head_dim * p.n_head != p.n_embd) {
    w.set(a + "attention.key_length", uint32_t(p.head_dim));
    w.set(a + "attention.value_length", uint32_t(p.head_dim));
  }
  w.set(a + "rope.dimension_count", uint32_t(p.head_dim));
  w.set(a + "rope.freq_base", float(p.rope_base));
  w.set(a + "attention.layer_norm_rms_epsilon", p.rms_eps);
  w.set(a + "vocab_size", uint32_t(n_vocab));
}

void synthesize(const SynthOptions& o) {
  const auto& preset = synth::find_preset(o.preset);
  const bool q4_k_m = o.type == "q4_k_m" || o.type == "Q4_K_M";
  const auto want = q4_k_m ? std::optional(DType::Q4_K) : dtype_from_name(o.type);
  const auto file_type = want ? gguf::file_type_for(*want) : std::nullopt;
  if (!file_type)
    throw Error(fmt::format("synth: --type '{}' is not one of f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                            "q2_k, q3_k, q4_k, q4_k_m, q5_k, q6_k", o.type));
  if (o.threads < 1 || o.threads > 256) throw Error("synth: --threads must be 1..256");
  const auto start = std::chrono::steady_clock::now();

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

  const auto plan = plan_tensors(preset, n_vocab, *want, q4_k_m);
  uint64_t total_bytes = 0, params = 0;
  for (const auto& t : plan) {
    w.add_tensor(t.name, t.type, t.shape);
    const int64_t rows = t.shape.size() > 1 ? t.shape[1] : 1;
    total_bytes += uint64_t(rows) * row_bytes(t.type, t.shape[0]);
    params += uint64_t(rows * t.shape[0]);
  }
  w.begin_data();

  ThreadPool pool(o.threads);
  std::vector<uint8_t> out;
  uint64_t written = 0;
  int reported = 0;
  for (size_t ti = 0; ti < plan.size(); ++ti) {
    const auto& t = plan[ti];
    const int64_t ne0 = t.shape[0], rows = t.shape.size() > 1 ? t.shape[1] : 1;
    const size_t row = row_bytes(t.type, ne0);
    const int64_t block_rows = std::max<int64_t>(1, (int64_t(1) << 22) / ne0);  // ~16 MB of floats
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
  w.finish();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print("synth: wrote {} ({} {}, {} tensors, {} parameters, {} bytes of weights) in {:.1f} s\n", o.output,
             preset.name, dtype_name(*want), plan.size(), params, total_bytes, seconds);
}

}  // namespace

void add_synth(CLI::App& app) {
  auto o = std::make_shared<SynthOptions>();
  auto* cmd = app.add_subcommand("synth", "write a random-weight GGUF with a real model's shapes");
  cmd->add_option("--preset", o->preset, "model shape: " + synth::preset_names())->required();
  cmd->add_option("--type", o->type, "weight type of the matrices (f32, f16, bf16, q8_0, q4_0, q4_k, q4_k_m (llama-quantize's mix), ...)")
      ->capture_default_str();
  cmd->add_option("-o,--output", o->output, "output .gguf file")->required();
  cmd->add_option("--vocab-from", o->vocab_from, "copy the tokenizer.* metadata of this GGUF");
  cmd->add_option("--seed", o->seed, "random seed")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "quantization threads")->capture_default_str();
  cmd->callback([o] { synthesize(*o); });
}

}  // namespace shardlm::cli
