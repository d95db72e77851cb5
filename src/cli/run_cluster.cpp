#include "cli/run_cluster.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "cli/cluster_token.h"
#include "cli/generated_text.h"
#include "cli/node_list.h"
#include "cluster/logging.h"
#include "comm/transport.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "parallel/nodes.h"
#include "parallel/wire_format.h"
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
  cmd.add_option("--pp", o.pp, "pipeline stages; default: planner's choice")->check(CLI::Range(1, 4096));
  cmd.add_option("--layers", o.layers, "layers per pipeline stage, e.g. 10,12,10")->delimiter(',');
  cmd.add_option("--worker-model", o.worker_model, "workers map their own copy of the model at this path");
  cmd.add_option("--token-file", o.token_file, "cluster token file (wins over $SHARDLM_TOKEN)");
  cmd.add_option("--wire-type", o.wire_type,
                 "activations on the wire (all-reduces, stage hand-offs): f32|f16|bf16|q8_0; default: by link speed");
  cmd.add_flag("--force", o.force, "plan even when the layout does not fit the workers' memory");
  cmd.add_option("--peer-timeout", o.peer_timeout,
                 "seconds of silence after which a worker is declared dead (heartbeats; a long step is not silence)")
      ->capture_default_str()
      ->check(CLI::Range(0.1, 3600.0));
}

cluster::ClusterOptions make_cluster_options(const ClusterRunOptions& c, int64_t ctx, int64_t batch,
                                             const std::string& kv_type, int threads) {
  cluster::ClusterOptions o;
  o.nodes = node_addresses(c.nodes, c.hostfile);
  o.token = cluster_token(c.token_file);
  o.plan.tp = c.tp;
  o.plan.pp = c.pp;
  o.plan.layers = c.layers;
  o.plan.n_ctx = ctx;
  o.plan.force = c.force;
  if (!c.wire_type.empty()) o.plan.wire_type = parallel::wire_type_from_name(c.wire_type);
  if (kv_type != "f32" && kv_type != "f16") throw Error(fmt::format("--kv-type: '{}' is not f32 or f16", kv_type));
  o.plan.kv_type = kv_type == "f16" ? DType::F16 : DType::F32;
  o.n_batch = batch;
  o.threads = threads;
  o.worker_model = c.worker_model;
  o.peer_timeout = c.peer_timeout;
  return o;
}

void run_on_cluster(const ClusterRunOptions& c, const ClusterRunRequest& r) {
  using Clock = std::chrono::steady_clock;
  cluster::log_to_stderr();
  const cluster::ClusterOptions o = make_cluster_options(c, r.ctx, r.batch, r.kv_type, r.threads);

  auto file = gguf::File::open(r.model);
  auto tokenizer = Tokenizer::from_gguf(*file);
  const auto prompt = tokenizer->encode(r.prompt, /*add_special=*/true, /*parse_special=*/true);
  if (prompt.empty()) throw Error("-p: the prompt has no tokens (and the vocabulary adds no BOS)");
  if (int64_t(prompt.size()) >= r.ctx)
    throw Error(fmt::format("-p: the prompt has {} tokens, more than --ctx {} allows", prompt.size(), r.ctx));

  warn_if_beyond_training(ModelConfig::from_gguf(*file), r.ctx);

  cluster::ClusterJob job(*file, o);
  const auto& plan = job.plan();
  GeneratedText text(*tokenizer, r.stops, r.display_prompt);
  text.begin(r.prompt);
  int n_generated = 0;
  const auto t0 = Clock::now();
  const int64_t room = r.ctx - int64_t(prompt.size());
  const int32_t n_predict = int32_t(r.n_predict < 0 ? room : std::min<int64_t>(r.n_predict, room));
  job.generate(prompt, n_predict, r.sampling, tokenizer->eos(), [&](TokenId t) {
    if (text.ended()) return;  // the workers finish the request; nothing more is shown
    ++n_generated;
    text.push(t);
  });
  job.finish();
  const double gen_s = std::chrono::duration<double>(Clock::now() - t0).count();
  text.end();
  if (!text.ended() && n_generated == room && (r.n_predict < 0 || r.n_predict > room)) note_context_full(r.ctx);

  const auto& st = job.stats();
  std::fprintf(stderr, "\n%s\n", ModelConfig::from_gguf(*file).summary().c_str());
  std::fprintf(stderr, "cluster: %zu workers, tp %d × pp %d; slices sent %.1f MiB, %d workers had theirs cached%s\n",
               size_t(plan.size()), plan.tp, plan.pp, double(st.bytes_sent) / (1 << 20), st.cached,
               o.worker_model.empty() ? "" : " (workers map their own model)");
  std::fprintf(stderr, "setup:   %8.1f ms\n", st.setup_seconds * 1e3);
  std::fprintf(stderr, "generate: %4d tokens in %8.1f ms (prompt %zu tokens included) = %.1f tok/s\n", n_generated,
               gen_s * 1e3, prompt.size(), gen_s > 0 ? n_generated / gen_s : 0.0);
}

}  // namespace shardlm::cli
