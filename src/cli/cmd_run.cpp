// shardlm run: generate text with a model on this machine.
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <thread>

#include "cli/chat_loop.h"
#include "cli/commands.h"
#include "cli/scheduled_run.h"
#include "cli/usage.h"
#include "cli/run_cluster.h"
#include "core/clock.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/sampler.h"
#include "core/memory_usage.h"
#include "serve/local_engine.h"
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
  bool chat = false;        // --chat / -cnv: cli/chat_loop.h
  std::string chat_template_file;
  int n_predict = 128;      // -1: until the end of text or of the context
  SamplerParams sampling;
  int64_t seed = -1;
  int threads = 0;
  int64_t ctx = kDefaultCtx;
  int64_t batch = 512;
  std::string kv_type = "f32";
  bool mmap = false;
  ClusterRunOptions cluster;  // --nodes/--hostfile: run on workers (cli/run_cluster.h)
};


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
    // (An ifstream opens a directory and reads nothing from it: an empty prompt.)
    if (std::filesystem::is_directory(o.prompt_file)) throw UsageError(fmt::format("-f: {} is a directory", o.prompt_file));
    std::ifstream in(o.prompt_file, std::ios::binary);
    if (!in) throw UsageError(fmt::format("-f: cannot read {}: {}", o.prompt_file, std::strerror(errno)));
    return read_all(in);
  }
  if (o.prompt == "-") return read_all(std::cin);
  return o.prompt;
}

void run(RunOptions o, const CLI::App& cmd) {
  reject_cluster_flags_alone(cmd, o.cluster);
  if (o.chat) {
    if (o.cluster.enabled()) throw UsageError("--chat: only on this machine (not with --nodes, --hostfile or --backend mpi)");
    o.sampling.seed = o.seed >= 0 ? uint64_t(o.seed) : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
    return run_chat({o.model, o.prompt, o.n_predict, o.sampling, o.threads, o.ctx, o.batch, o.kv_type, o.stops,
                     o.chat_template_file},
                    std::cin);
  }
  o.prompt = prompt_text(o, cmd.count("--prompt") > 0);
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
  const auto t_load = SteadyClock::now();
  const DType kv_type = kv_type_of(o.kv_type);
  auto file = gguf::File::open(o.model);
  auto tokenizer = Tokenizer::from_gguf(*file);
  const int threads = o.threads > 0 ? o.threads : usable_cpus();
  auto pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  ModelOptions mo;
  mo.n_ctx = o.ctx;
  mo.n_batch = o.batch + 1;  // a prompt chunk of --batch, and room for the scheduler's decode entry
  mo.kv_type = kv_type;
  mo.weights_in_memory = !o.mmap;
  // Timed on first use, the choices took ~0.2 s out of the prompt's rate
  // printed below (1B Q4_0, Zen 5: 28 tokens at 114 tok/s, not 250).
  mo.time_kernels_at_load = true;
  mo.pool = pool.get();
  serve::LocalEngine engine(*file, mo);
  const ModelConfig config = ModelConfig::from_gguf(*file);
  warn_if_beyond_training(config, o.ctx);
  // Embeddings may have padding rows beyond the vocabulary; never the reverse.
  if (tokenizer->n_vocab() > config.n_vocab)
    throw Error(fmt::format("{}: tokenizer has {} tokens but token_embd.weight only {} rows", o.model,
                            tokenizer->n_vocab(), config.n_vocab));
  const double load_s = seconds_since(t_load);

  const auto prompt = tokenizer->encode(o.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (const std::string problem = prompt_fit_problem(prompt.size(), o.ctx); !problem.empty())
    throw Error(fmt::format("{}: {}", o.prompt_file.empty() ? "-p" : "-f", problem));

  o.sampling.seed = o.seed >= 0 ? uint64_t(o.seed) : uint64_t(std::chrono::system_clock::now().time_since_epoch().count());
  g_interrupted.store(false);
  auto previous = std::signal(SIGINT, on_sigint);
  const auto result = run_scheduled(engine, *tokenizer,
                                    {o.prompt, prompt, o.sampling, o.n_predict, o.stops, !o.no_display_prompt,
                                     o.batch, &g_interrupted});
  std::signal(SIGINT, previous);
  if (result.context_full) note_context_full(o.ctx);

  const auto mem = read_memory_usage();
  auto per_s = [](double n, double s) { return s > 0 ? n / s : 0.0; };
  std::fprintf(stderr, "\n%s%s\n", g_interrupted.load() ? "interrupted; " : "", config.summary().c_str());
  std::fprintf(stderr, "load:    %8.1f ms\n", load_s * 1e3);
  std::fprintf(stderr, "prompt:  %5zu tokens in %8.1f ms = %8.1f tok/s\n", prompt.size(), result.prompt_seconds * 1e3,
               per_s(double(prompt.size()), result.prompt_seconds));
  std::fprintf(stderr, "decode:  %5lld tokens in %8.1f ms = %8.1f tok/s (%d threads, seed %llu)\n",
               static_cast<long long>(result.generated), result.decode_seconds * 1e3,
               per_s(double(result.generated), result.decode_seconds), threads,
               static_cast<unsigned long long>(o.sampling.seed));
  std::fprintf(stderr, "memory:  VmRSS %.1f MiB, VmHWM %.1f MiB (KV cache %.1f MiB, %s)\n", double(mem.rss_kib) / 1024,
               double(mem.hwm_kib) / 1024, double(engine.kv_cache_bytes()) / (1 << 20), o.kv_type.c_str());
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
  cmd->add_flag("--chat,--conversation", o->chat,
                "chat (also -cnv): each line of standard input is a message, -p the system message");
  cmd->add_option("--chat-template-file", o->chat_template_file, "--chat with this Jinja template instead of the model's");
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
  add_kv_type_option(*cmd, o->kv_type);
  add_mmap_flag(*cmd, o->mmap);
  add_cluster_run_options(*cmd, o->cluster);
  cmd->callback([o, cmd] { run(*o, *cmd); });
}

}  // namespace shardlm::cli
