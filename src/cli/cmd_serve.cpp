// shardlm serve: one model behind the OpenAI-compatible HTTP server, with
// continuous batching over --parallel KV slots (src/serve).
#include <fcntl.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <thread>

#include "chat/errors.h"
#include "chat/model_template.h"
#include "cli/chat_template_file.h"
#include "cli/commands.h"
#include "cli/run_cluster.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "cluster/mpi_job.h"
#include "core/cpu.h"
#include "core/error.h"
#include "core/text.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "serve/cluster_engine.h"
#include "serve/http_server.h"
#include "serve/session_engine.h"
#include "serve/local_engine.h"
#include "serve/scheduler.h"
#include "tokenizer/vocab.h"

namespace shardlm::cli {
namespace {

struct ServeOptions {
  std::string model;
  std::string host = "127.0.0.1";
  int port = 8080;
  int64_t ctx = 2048;
  int parallel = 4;
  int threads = 0;
  int64_t prefill_budget = 256;
  double prefill_step_ratio = 2;
  int max_waiting = 64;
  size_t max_body = 8 << 20;
  std::string api_key_file;
  std::vector<std::string> cors_origins;
  std::string alias;
  std::string chat_template_file;
  std::string reasoning_format = "auto";
  bool mmap = false;
  bool batch_invariant = false;  // ModelOptions::batch_invariant
  ClusterRunOptions cluster;  // --nodes/--hostfile: the workers compute (cli/run_cluster.h)
};

std::set<std::string> read_api_keys(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--api-key-file {}: cannot open", path));
  std::set<std::string> keys;
  std::string line;
  while (std::getline(in, line)) {
    line = std::string(strip_blanks(line));
    if (!line.empty() && line[0] != '#') keys.insert(line);
  }
  if (keys.empty()) throw Error(fmt::format("--api-key-file {}: no keys (one per line)", path));
  return keys;
}

// SIGINT and SIGTERM land on whichever of serve's threads the kernel picks.
// The handler only writes a byte to a pipe, errno kept (it had called
// stop() itself, racing the server's destruction, and its errno clobbered
// the interrupted thread's); a thread of its own reads the pipe: the first
// signal stops the server, a second ends the process at once.
int g_signal_pipe[2] = {-1, -1};  // never closed: a handler may still be writing
extern "C" void on_stop_signal(int) {
  const int saved = errno;
  const char byte = 's';
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
  errno = saved;
}

class StopOnSignal {
 public:
  explicit StopOnSignal(serve::HttpServer& server) {
    if (g_signal_pipe[0] < 0 && ::pipe2(g_signal_pipe, O_CLOEXEC) != 0)
      throw Error(fmt::format("serve: pipe: {}", std::strerror(errno)));
    watcher_ = std::thread([&server] {
      int signals = 0;
      for (;;) {
        char byte = 0;
        const ssize_t n = ::read(g_signal_pipe[0], &byte, 1);
        if (n < 0 && errno == EINTR) continue;
        if (n != 1 || byte == 'q') return;
        if (++signals == 1) {
          spdlog::info("serve: stopping (a second interrupt ends the process at once)");
          server.stop();
        } else {
          std::fprintf(stderr, "shardlm serve: interrupted again, exiting\n");
          std::_Exit(130);
        }
      }
    });
    std::signal(SIGINT, on_stop_signal);
    std::signal(SIGTERM, on_stop_signal);
  }
  // Signals act as by default again (a Ctrl-C while cluster workers are let go ends the process).
  ~StopOnSignal() {
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const char quit = 'q';
    [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &quit, 1);
    watcher_.join();
  }

 private:
  std::thread watcher_;
};

// Under MPI the other ranks wait for rank 0's next step as long as the server
// idles; a dead rank is mpirun's to report (it ends the job).
constexpr double kServeFollowSeconds = 7 * 24 * 3600.0;

// The scheduler and the HTTP server over `engine`, until SIGINT or SIGTERM.
void serve_http(serve::Engine& engine, const gguf::File& file, const Tokenizer& tok, const ServeOptions& o,
                std::set<std::string> keys) {
  // cpp-httplib 0.11 writes without MSG_NOSIGNAL: a write to a client that
  // has just gone would end the whole server with SIGPIPE, not with EPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  serve::Metrics metrics;
  serve::SchedulerOptions so;
  so.prefill_budget = o.prefill_budget;
  so.prefill_step_ratio = o.prefill_step_ratio;
  so.max_waiting = o.max_waiting;
  serve::Scheduler scheduler(engine, tok, so, &metrics);

  const std::optional<chat::ModelTemplate> chat_template = load_chat_template(file, o.chat_template_file);
  serve::ServerOptions http;
  http.chat_template = chat_template ? &*chat_template : nullptr;
  http.host = o.host;
  http.port = o.port;
  http.model_id = o.alias.empty() ? std::filesystem::path(o.model).filename().string() : o.alias;
  http.api_keys = std::move(keys);
  http.max_body_bytes = o.max_body;
  http.cors_origins = {o.cors_origins.begin(), o.cors_origins.end()};
  http.separate_reasoning = o.reasoning_format != "none";
  http.connection_threads = o.parallel + o.max_waiting + 8;
  serve::HttpServer server(scheduler, tok, metrics, o.ctx, http);
  const int port = server.bind();
  scheduler.start();
  StopOnSignal stop_on_signal(server);
  std::printf("shardlm serve: model %s on http://%s:%d (%d slots × %lld positions)\n", http.model_id.c_str(),
              o.host.c_str(), port, o.parallel, static_cast<long long>(o.ctx));
  std::fflush(stdout);
  server.listen();
}

void serve(const ServeOptions& o) {
  if (o.parallel < 1 || o.parallel > 256) throw Error(fmt::format("--parallel {} must be in [1, 256]", o.parallel));
  if (o.ctx < 8) throw Error(fmt::format("--ctx {} is too small", o.ctx));
  std::set<std::string> keys;
  if (!o.api_key_file.empty()) keys = read_api_keys(o.api_key_file);
  // A step holds a decode entry per slot and the prefill budget.
  const int64_t step_entries = o.prefill_budget + o.parallel;
  std::unique_ptr<cluster::MpiJob> mpi_job;
  if (o.cluster.mpi()) {
    cluster::log_to_stderr();
    auto mo = make_mpi_job_options(o.cluster, o.ctx, step_entries, "f32", o.threads, o.parallel);
    mo.op_timeout_seconds = kServeFollowSeconds;
    mo.runtime.batch_invariant = o.batch_invariant;
    mpi_job = std::make_unique<cluster::MpiJob>(o.model, mo);
    if (mpi_job->rank() != 0) return mpi_job->finish();  // follows rank 0's steps until it stops serving
  }
  auto file = gguf::File::open(o.model);
  auto tok = Tokenizer::from_gguf(*file);
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<serve::Engine> engine_owner;
  serve::ClusterEngine* cluster_engine = nullptr;
  if (mpi_job) {
    const auto& plan = mpi_job->plan();
    spdlog::info("serve: tp {} × pp {} on {} MPI ranks", plan.tp, plan.pp, mpi_job->world_size());
    engine_owner = std::make_unique<serve::SessionEngine>(mpi_job->session());
  } else if (o.cluster.enabled()) {
    cluster::log_to_stderr();
    auto co = make_cluster_options(o.cluster, o.ctx, step_entries, "f32", o.threads);
    co.plan.n_seq = o.parallel;
    co.batch_invariant = o.batch_invariant;
    co.progress = false;
    auto engine = std::make_unique<serve::ClusterEngine>(
        [&file, co](std::span<const std::string> left_out) {
          return std::make_unique<cluster::ClusterJob>(*file, serve::without_nodes(co, left_out));
        },
        o.parallel, o.ctx, step_entries,
        ModelConfig::from_gguf(*file).n_vocab);
    const auto& plan = engine->job().plan();
    spdlog::info("serve: tp {} × pp {} on {} workers", plan.tp, plan.pp, plan.size());
    cluster_engine = engine.get();
    engine_owner = std::move(engine);
  } else {
    const int threads = o.threads > 0 ? o.threads : usable_cpus();
    if (threads > 1) pool = std::make_unique<ThreadPool>(threads);
    ModelOptions mo;
    mo.n_ctx = o.ctx;
    mo.n_seq = o.parallel;
    mo.n_batch = step_entries;
    mo.pool = pool.get();
    mo.commit_kv_cache = true;
    mo.time_kernels_at_load = true;
    mo.weights_in_memory = !o.mmap;
    mo.batch_invariant = o.batch_invariant;
    auto local = std::make_unique<serve::LocalEngine>(*file, mo);
    spdlog::info("serve: KV cache {} slots × {} positions, {:.0f} MiB resident", o.parallel, o.ctx,
                 double(local->kv_cache_bytes()) / (1 << 20));
    engine_owner = std::move(local);
  }
  serve_http(*engine_owner, *file, *tok, o, std::move(keys));
  if (mpi_job) mpi_job->finish();  // the other ranks stop following
  if (cluster_engine && cluster_engine->health().empty()) {
    try {
      cluster_engine->finish();  // the workers go back to idle
    } catch (const Error& e) {
      spdlog::warn("serve: {}", e.what());
    }
  }
}

}  // namespace

void add_serve(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching (on workers: --nodes)");
  cmd->add_option("-m,--model", o->model, "GGUF model file")->required();
  cmd->add_option("--host", o->host, "address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "port (0: any free port, printed at start)")->capture_default_str()->check(CLI::Range(0, 65535));
  cmd->add_option("-c,--ctx", o->ctx, "positions per sequence (prompt + completion)")->capture_default_str();
  cmd->add_option("--parallel", o->parallel, "sequences decoded together (KV slots)")->capture_default_str();
  cmd->add_option("-t,--threads", o->threads, "compute threads (0: all cores)")->capture_default_str();
  cmd->add_option("--prefill-budget", o->prefill_budget, "prompt tokens per step (chunked prefill)")->capture_default_str()->check(CLI::Range(1, 8192));
  cmd->add_option("--prefill-step-ratio", o->prefill_step_ratio,
                  "beside running streams, a step reading prompt tokens lasts at most this many times a decode-only "
                  "step (<= 1: only --prefill-budget limits it)")
      ->capture_default_str()
      ->check(finite_in(0, 1000));
  cmd->add_option("--queue", o->max_waiting, "requests that may wait for a slot; more get 429")->capture_default_str()->check(CLI::Range(0, 100000));
  cmd->add_option("--max-body", o->max_body, "largest request body in bytes; larger get 413")
      ->capture_default_str()
      ->check(integer_in(1, std::numeric_limits<long long>::max()));
  cmd->add_option("--api-key-file", o->api_key_file, "file of accepted API keys, one per line (Authorization: Bearer KEY)");
  cmd->add_option("--cors", o->cors_origins,
                  "web origins whose pages may call the API from a browser (comma-separated, e.g. "
                  "https://chat.example.org; '*': any); default none")
      ->delimiter(',');
  cmd->add_option("--chat-template-file", o->chat_template_file,
                  "Jinja chat template to use instead of the model's tokenizer.chat_template")
      ->check(CLI::ExistingFile);
  cmd->add_option("--reasoning-format", o->reasoning_format,
                  "a thinking model's <think> text: auto (or deepseek) sends it as message.reasoning_content, none "
                  "leaves it in the content (a request's reasoning_format overrides)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "deepseek", "none"}));
  cmd->add_option("--alias", o->alias, "model id in the API (default: the file name)");
  add_mmap_flag(*cmd, o->mmap);
  cmd->add_flag("--batch-invariant", o->batch_invariant,
                "a request's results do not depend on the requests served beside it (reproducible greedy "
                "answers under load; quantized weights; decode with a long context is slower)");
  add_cluster_run_options(*cmd, o->cluster);
  cmd->callback([o, cmd] {
    if (o->cluster.mpi() && (!o->cluster.nodes.empty() || !o->cluster.hostfile.empty()))
      throw UsageError("--backend mpi: the ranks come from mpirun/srun, not from --nodes or --hostfile");
    reject_cluster_flags_alone(*cmd, o->cluster);
    serve(*o);
  });
}

}  // namespace shardlm::cli
