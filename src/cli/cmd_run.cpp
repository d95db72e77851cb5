// shardlm run: generate text with a model on this machine.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include "cli/commands.h"
#include "cli/generated_text.h"
#include "cli/usage.h"
#include "cli/run_cluster.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/sampler.h"
#include "model/session.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {
namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted.store(true); }

struct RunOptions {
  std::string model;
  std::string prompt;       // -p TEXT, or "-": read stdin
  std::string prompt_file;  // -f FILE
  std::vector<std::string> stops;
  bool no_display_prompt = false;
  int n_predict = 128;      // -1: until the end of text or of the context
  SamplerParams sampling;
  int64_t seed = -1;
  int threads = 0;
  int64_t ctx = kDefaultCtx;
  int64_t batch = 512;
  std::string kv_type = "f32";
  ClusterRunOptions cluster;  // --nodes/--hostfile: run on workers (cli/run_cluster.h)
};

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

DType parse_kv_type(const std::string& s) {
  if (s == "f32") return DType::F32;
  if (s == "f16") return DType::F16;
  throw Error(fmt::format("--kv-type: '{}' is not f32 or f16", s));
}

std::string read_all(std::istream& in) {
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// -p TEXT, -p - (stdin) or -f FILE: exactly one.
std::string prompt_text(const RunOptions& o, bool prompt_given) {
  if (prompt_given == !o.prompt_file.empty())
    throw UsageError("-p/-f: give the prompt as -p TEXT, -p - (standard input) or -f FILE");
  if (!o.prompt_file.empty()) {
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("-f: cannot read {}: {}", o.prompt_file, std::strerror(errno)));
    return read_all(in);
  }
  if (o.prompt == "-") return read_all(std::cin);
  return o.prompt;
}

void run(RunOptions o, const CLI::App& cmd) {
  o.prompt = prompt_text(o, cmd.count("--prompt") > 0);
  // Chat mode (-cnv) is meant to hook in here: a loop of prompts built with
  // the model's chat template, each answered with the code below.
  if (!o.cluster.enabled())
    for (const char* flag : {"--tp", "--pp", "--layers", "--worker-model", "--peer-timeout", "--distribute-weights", "--cache-dir"})
      if (cmd.count(flag)) throw UsageError(fmt::format("{}: only with --nodes or --hostfile", flag));
  if (o.cluster.enabled()) {
    if (o.cluster.mpi() && (!o.cluster.nodes.empty() || !o.cluster.hostfile.empty()))
      throw UsageError("--backend mpi: the ranks come from mpirun/srun, not from --nodes or --hostfile");
    if (!o.cluster.mpi() && (o.cluster.distribute_weights || !o.cluster.cache_dir.empty()))
      throw UsageError("--distribute-weights/--cache-dir: only with --backend mpi");
    o.sampling.seed = o.seed >= 0 ? uint64_t(o.seed) : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    const ClusterRunRequest request{o.model, o.prompt, o.kv_type, o.n_predict, o.threads, o.ctx, o.batch, o.sampling,
                                    o.stops, !o.no_display_prompt};
    if (o.cluster.mpi()) run_on_mpi(o.cluster, request);
    else run_on_cluster(o.cluster, request);
    return;
  }
  const int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  if (o.threads > 4 * cores)
    throw UsageError(fmt::format("-t: {} threads on {} cores (at most {})", o.threads, cores, 4 * cores));
  const auto t_load = Clock::now();
  const DType kv_type = parse_kv_type(o.kv_type);
  auto file = gguf::File::open(o.model);
  auto tokenizer = Tokenizer::from_gguf(*file);
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  auto pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  ModelOptions mo;
  mo.n_ctx = o.ctx;
  mo.n_batch = o.batch;
  mo.kv_type = kv_type;
  mo.pool = pool.get();
  Model model(*file, mo);
  warn_if_beyond_training(model.config(), o.ctx);
  // Embeddings may have padding rows beyond the vocabulary; never the reverse.
  const int64_t n_vocab = tokenizer->n_vocab();
  if (n_vocab > model.config().n_vocab)
    throw Error(fmt::format("{}: tokenizer has {} tokens but token_embd.weight only {} rows", o.model, n_vocab,
                            model.config().n_vocab));
  const double load_s = seconds_since(t_load);

  const auto prompt = tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) throw Error("-p: the prompt has no tokens (and the vocabulary adds no BOS)");
  if (int64_t(prompt.size()) >= o.ctx)
    throw Error(fmt::format("-p: the prompt has {} tokens, more than --ctx {} allows", prompt.size(), o.ctx));

  o.sampling.seed = o.seed >= 0 ? uint64_t(o.seed) : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  Sampler sampler(o.sampling, n_vocab);
  for (TokenId t : prompt) sampler.accept(t);

  g_interrupted.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  GeneratedText text(*tokenizer, o.stops, !o.no_display_prompt);
  text.begin(o.prompt);

  const auto t_prompt = Clock::now();
  const bool prompt_done = eval_prompt(model, prompt, 0, 0, &g_interrupted);
  const double prompt_s = seconds_since(t_prompt);

  const int64_t n_predict = o.n_predict < 0 ? o.ctx : o.n_predict;
  int n_generated = 0;
  const auto t_decode = Clock::now();
  int32_t pos = int32_t(prompt.size());
  while (prompt_done && n_generated < n_predict && pos < o.ctx && !g_interrupted.load()) {
    const TokenId next = sampler.sample(model.logits(0).first(size_t(n_vocab)));
    sampler.accept(next);
    ++n_generated;
    if (!text.push(next)) break;
    if (n_generated == n_predict || pos >= o.ctx) break;
    Batch b;
    b.add(0, pos++, next, true);
    model.forward(b);
  }
  const double decode_s = seconds_since(t_decode);
  text.end();
  std::signal(SIGINT, previous);
  if (!text.ended() && pos >= o.ctx && n_generated < n_predict && !g_interrupted.load())
    note_context_full(o.ctx);

  const auto mem = read_memory_usage();
  auto per_s = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  std::fprintf(stderr, "\n%s%s\n", g_interrupted.load() ? "interrupted; " : "", model.config().summary().c_str());
  std::fprintf(stderr, "load:    %8.1f ms\n", load_s * 1e3);
  std::fprintf(stderr, "prompt:  %5zu tokens in %8.1f ms = %8.1f tok/s\n", prompt.size(), prompt_s * 1e3,
               per_s(double(prompt.size()), prompt_s));
  std::fprintf(stderr, "decode:  %5d tokens in %8.1f ms = %8.1f tok/s (%d threads, seed %llu)\n", n_generated,
               decode_s * 1e3, per_s(n_generated, decode_s), threads,
               static_cast<unsigned long long>(o.sampling.seed));
  std::fprintf(stderr, "memory:  VmRSS %.1f MiB, VmHWM %.1f MiB (KV cache %.1f MiB, %s)\n", double(mem.rss_kib) / 1024,
               double(mem.hwm_kib) / 1024, double(model.kv_cache().bytes()) / (1 << 20), o.kv_type.c_str());
}

}  // namespace

void add_run(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  auto* cmd = app.add_subcommand("run", "generate text from a prompt on this machine (or on workers: --nodes)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("-p,--prompt", o->prompt, "prompt text; - reads it from standard input");
  cmd->add_option("-f,--file", o->prompt_file, "read the prompt from this file");
  cmd->add_option("-n,--n-predict", o->n_predict, "most tokens to generate; -1 = until the end of text or context")
      ->capture_default_str()
      ->check(integer_in(-1, int64_t(1) << 24));
  cmd->add_option("--stop", o->stops, "end generation at this text, not printed (repeatable)")
      ->allow_extra_args(false);
  cmd->add_flag("--no-display-prompt", o->no_display_prompt, "print only the generated text");
  cmd->add_option("--temp", o->sampling.temperature, "temperature; 0 = greedy")
      ->capture_default_str()
      ->check(finite_in(0, 100));
  cmd->add_option("--top-k", o->sampling.top_k, "keep the k most likely tokens; 0 = off")
      ->capture_default_str()
      ->check(integer_in(0, 1 << 24));
  cmd->add_option("--top-p", o->sampling.top_p, "nucleus: smallest set with this probability; 1 = off")
      ->capture_default_str()
      ->check(finite_in(0, 1));
  cmd->add_option("--min-p", o->sampling.min_p, "drop tokens below min-p × best probability; 0 = off")
      ->capture_default_str()
      ->check(finite_in(0, 1));
  cmd->add_option("--repeat-penalty", o->sampling.repeat_penalty, "penalty for recent tokens; 1 = off")
      ->capture_default_str()
      ->check(finite_in(0.01, 100));
  cmd->add_option("--presence-penalty", o->sampling.presence_penalty, "subtracted from recent tokens' logits")
      ->capture_default_str()
      ->check(finite_in(-100, 100));
  cmd->add_option("--repeat-last-n", o->sampling.penalty_window, "how many recent tokens the penalties see")
      ->capture_default_str()
      ->check(integer_in(0, 1 << 24));
  cmd->add_option("-s,--seed", o->seed, "sampling seed; default: from the clock")
      ->check(integer_in(-1, std::numeric_limits<int64_t>::max()));
  cmd->add_option("-t,--threads", o->threads, "threads (per worker with --nodes); default: all cores")
      ->check(integer_in(0, 1024));
  cmd->add_option("-c,--ctx", o->ctx, "context length (KV cache positions)")
      ->capture_default_str()
      ->check(integer_in(1, int64_t(1) << 24));
  cmd->add_option("-b,--batch", o->batch, "prompt tokens per forward pass")
      ->capture_default_str()
      ->check(integer_in(1, 65536));
  cmd->add_option("--kv-type", o->kv_type, "KV cache type: f32 or f16")
      ->capture_default_str()
      ->check(CLI::IsMember({"f32", "f16"}));
  add_cluster_run_options(*cmd, o->cluster);
  cmd->callback([o, cmd] { run(*o, *cmd); });
}

}  // namespace shardlm::cli
