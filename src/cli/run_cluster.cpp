#include "cli/run_cluster.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "cli/cluster_token.h"
#include "cli/scheduled_run.h"
#include "cli/node_list.h"
#include "cli/usage.h"
#include "cluster/logging.h"
#include "comm/transport.h"
#include "core/error.h"
#include "net/port_range.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "parallel/nodes.h"
#include "parallel/wire_format.h"
#include "serve/cluster_engine.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {

void warn_if_beyond_training(const ModelConfig& config, int64_t ctx) {
  if (config.n_ctx_train > 0 && ctx > config.n_ctx_train)
    spdlog::warn("--ctx {} is beyond the {} positions the model was trained for; expect worse text past them", ctx,
                 config.n_ctx_train);
}

void note_context_full(int64_t ctx) {
  std::fprintf(stderr, "note: generation stopped at the end of the context (--ctx %lld)\n", static_cast<long long>(ctx));
}

void add_cluster_run_options(CLI::App& cmd, ClusterRunOptions& o) {
  cmd.add_option("--nodes", o.nodes, "run on these workers (host:port,...) as a cluster");
  cmd.add_option("--backend", o.backend,
                 "workers: shardlm workers (--nodes/--hostfile); mpi: the ranks mpirun/srun started")
      ->capture_default_str()
      ->check(CLI::IsMember({"workers", "mpi"}));
  cmd.add_flag("--distribute-weights", o.distribute_weights,
               "--backend mpi: only rank 0 reads the model and sends each rank its slices");
  cmd.add_option("--cache-dir", o.cache_dir,
                 "--backend mpi --distribute-weights: keep received slices here (SHA-256 named) for the next launch");
  cmd.add_option("--hostfile", o.hostfile, "run on the workers listed in this file (host:port per line)");
  cmd.add_option("--tp", o.tp, "tensor-parallel ranks per stage; default: planner's choice")->check(CLI::Range(1, 4096));
  cmd.add_option("--ep", o.ep,
                 "mixture-of-experts models: tensor-parallel ranks per stage that hold whole experts (--tp splits "
                 "every expert's rows instead); default: planner's choice")
      ->check(CLI::Range(1, 4096))
      ->excludes("--tp");
  cmd.add_option("--pp", o.pp, "pipeline stages; default: planner's choice")->check(CLI::Range(1, 4096));
  cmd.add_option("--layers", o.layers, "layers per pipeline stage, e.g. 10,12,10")->delimiter(',');
  cmd.add_option("--worker-model", o.worker_model, "workers map their own copy of the model at this path");
  cmd.add_option("--token-file", o.token_file, "cluster token file (wins over $SHARDLM_TOKEN)");
  cmd.add_option("--wire-type", o.wire_type,
                 "activations on the wire (all-reduces, stage hand-offs): f32|f16|bf16|q8_0; default: by link speed")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  cmd.add_option("--balance-margin", o.balance_margin,
                 "share of each tensor-parallel neighbour's FFN and output rows a rank also holds, to compute them "
                 "while the neighbour is slower (0: none, less memory)")
      ->capture_default_str()
      ->check(finite_in(0, 0.5));
  cmd.add_flag("--force", o.force, "plan even when the layout does not fit the workers' memory");
  cmd.add_option("--peer-timeout", o.peer_timeout,
                 "seconds of silence after which a worker is declared dead (heartbeats; a long step is not silence)")
      ->capture_default_str()
      ->check(finite_in(0.1, 3600));
  cmd.add_option("--comm-port", o.comm_port,
                 "PORT or LO-HI: where the job's links listen, here and on every worker (the first free port of the range)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            try {
              net::parse_port_range(text);
            } catch (const Error& e) {
              return e.what();
            }
            return "";
          },
          "PORT|LO-HI"));
}

void reject_cluster_flags_alone(const CLI::App& cmd, const ClusterRunOptions& o) {
  if (o.enabled()) return;
  for (const char* flag : {"--tp", "--ep", "--pp", "--layers", "--worker-model", "--token-file", "--wire-type",
                           "--balance-margin", "--force",
                           "--peer-timeout", "--comm-port", "--distribute-weights", "--cache-dir"})
    if (cmd.count(flag)) throw UsageError(fmt::format("{}: only with --nodes or --hostfile", flag));
}

parallel::PlanRequest plan_request(const ClusterRunOptions& c, int64_t ctx, DType kv_type) {
  parallel::PlanRequest r;
  r.tp = c.tp;
  r.ep = c.ep;
  r.pp = c.pp;
  r.layers = c.layers;
  r.n_ctx = ctx;
  r.force = c.force;
  r.kv_type = kv_type;
  if (!c.wire_type.empty()) r.wire_type = parallel::wire_type_from_name(c.wire_type);
  r.balance_margin = c.balance_margin;
  return r;
}

cluster::ClusterOptions make_cluster_options(const ClusterRunOptions& c, int64_t ctx, int64_t batch,
                                             const std::string& kv_type, int threads) {
  cluster::ClusterOptions o;
  o.nodes = node_addresses(c.nodes, c.hostfile);
  o.token = cluster_token(c.token_file);
  o.plan = plan_request(c, ctx, kv_type_of(kv_type));
  o.n_batch = batch;
  o.threads = threads;
  o.worker_model = c.worker_model;
  o.peer_timeout = c.peer_timeout;
  if (!c.comm_port.empty()) o.comm_ports = net::parse_port_range(c.comm_port);
  return o;
}

void run_on_cluster(const ClusterRunOptions& c, const ClusterRunRequest& r) {
  cluster::log_to_stderr();
  // One KV slot; a step holds a prompt chunk of --batch or a decode entry.
  const cluster::ClusterOptions o = make_cluster_options(c, r.ctx, r.batch + 1, r.kv_type, r.threads);

  auto file = gguf::File::open(r.model);
  auto tokenizer = Tokenizer::from_gguf(*file);
  const auto prompt = tokenizer->encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (const std::string problem = prompt_fit_problem(prompt.size(), r.ctx); !problem.empty()) throw Error(problem);

  warn_if_beyond_training(ModelConfig::from_gguf(*file), r.ctx);

  serve::ClusterEngine engine([&](auto) { return std::make_unique<cluster::ClusterJob>(*file, o); }, o.plan.n_seq, r.ctx,
                              o.n_batch, ModelConfig::from_gguf(*file).n_vocab);
  const ScheduledRunResult result = run_scheduled(
      engine, *tokenizer, {r.prompt, prompt, r.sampling, r.n_predict, r.stops, r.display_prompt, r.batch, nullptr});
  engine.finish();
  const cluster::ClusterJob& job = engine.job();
  const auto& plan = job.plan();
  if (result.context_full) note_context_full(r.ctx);
  const double gen_s = result.prompt_seconds + result.decode_seconds;
  const int64_t n_generated = result.generated;

  const auto& st = job.stats();
  std::fprintf(stderr, "\n%s\n", ModelConfig::from_gguf(*file).summary().c_str());
  std::fprintf(stderr, "cluster: %zu workers, tp %d × pp %d; slices sent %.1f MiB, %d workers had theirs cached%s\n",
               size_t(plan.size()), plan.tp, plan.pp, double(st.bytes_sent) / (1 << 20), st.cached,
               o.worker_model.empty() ? "" : " (workers map their own model)");
  std::fprintf(stderr, "setup:   %8.1f ms\n", st.setup_seconds * 1e3);
  std::fprintf(stderr, "generate: %4lld tokens in %8.1f ms (prompt %zu tokens included) = %.1f tok/s\n",
               static_cast<long long>(n_generated), gen_s * 1e3, prompt.size(),
               gen_s > 0 ? double(n_generated) / gen_s : 0.0);
}

}  // namespace shardlm::cli
