// shardlm plan: the layout a model would get over some nodes, with memory and
// a speed prediction. With --nodes/--hostfile the workers are asked for their
// figures, as `run` does (so both choose the same layout); --describe FILE
// plans over hypothetical nodes without any network.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "cli/cluster_token.h"
#include "cli/commands.h"
#include "cli/node_list.h"
#include "cli/run_cluster.h"
#include "cli/synth.h"
#include "cli/usage.h"
#include "cluster/ask.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "parallel/planner.h"
#include "parallel/wire_format.h"

namespace shardlm::cli {
namespace {

struct PlanOptions {
  std::string model, nodes, hostfile, describe, kv_type = "f32", token_file, wire_type;
  std::string preset, preset_type = "q4_k_m";
  std::vector<int64_t> layers;
  parallel::PlanRequest request;
  PlanOptions() { request.n_ctx = kDefaultCtx; }
};

// A synth preset's GGUF without its weights (a sparse file, gone once
// mapped): the model's real header and tensor sizes, no disk space.
std::unique_ptr<gguf::File> preset_header(const std::string& preset, const std::string& type) {
  synth::Options o;
  o.preset = preset;
  o.type = type;
  o.weights = false;
  o.output = (std::filesystem::temp_directory_path() / fmt::format("shardlm-plan-{}-{}.gguf", preset, getpid())).string();
  synth::write_model(o);
  std::unique_ptr<gguf::File> file;
  try {
    file = gguf::File::open(o.output);
  } catch (...) {
    std::filesystem::remove(o.output);
    throw;
  }
  std::filesystem::remove(o.output);
  return file;
}

void plan(PlanOptions o) {
  if (o.model.empty() == o.preset.empty()) throw UsageError("plan: give exactly one of -m/--model and --preset");
  const int sources = !o.nodes.empty() + !o.hostfile.empty() + !o.describe.empty();
  if (sources != 1) throw UsageError("plan: give exactly one of --nodes, --hostfile, --describe");
  std::vector<parallel::NodeSpec> nodes;
  if (!o.describe.empty()) {
    nodes = parallel::nodes_from_json_file(o.describe);
  } else {
    const auto addresses = node_addresses(o.nodes, o.hostfile);
    const std::string token = cluster_token(o.token_file);
    for (const auto& address : addresses)
      nodes.push_back(cluster::node_from_info(address, cluster::ask_worker(address, token, cluster::kDefaultPeerTimeoutSeconds)));
  }
  o.request.layers = o.layers;
  o.request.kv_type = kv_type_of(o.kv_type);
  if (!o.wire_type.empty()) o.request.wire_type = parallel::wire_type_from_name(o.wire_type);
  auto file = o.preset.empty() ? gguf::File::open(o.model) : preset_header(o.preset, o.preset_type);
  const auto p = parallel::make_plan(*file, nodes, o.request);
  std::fputs(p.describe(ModelConfig::from_gguf(*file)).c_str(), stdout);
}

}  // namespace

void add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "print the tp × pp layout, memory and predicted speed over some nodes");
  cmd->add_option("-m,--model", o->model, "GGUF model");
  cmd->add_option("--preset", o->preset,
                  "plan a synth preset's shape instead of a file (no weights written): " + synth::preset_names());
  cmd->add_option("--type", o->preset_type, "--preset: weight type, as synth's --type")->capture_default_str();
  cmd->add_option("--nodes", o->nodes, "live workers host:port,... (asked for their memory, cores, bandwidth)");
  cmd->add_option("--hostfile", o->hostfile, "live workers, one host:port per line");
  cmd->add_option("--describe", o->describe,
                  "FILE: JSON description of hypothetical nodes, no network; e.g. {\"nodes\": [{\"name\": \"a\", "
                  "\"memory_gb\": 16, \"bandwidth_gbs\": 40, \"cores\": 8, \"link_latency_us\": 50, "
                  "\"link_bandwidth_gbs\": 1.25, \"count\": 2}]} (README: Planning)");
  cmd->add_option("--token-file", o->token_file, "cluster token file (wins over $SHARDLM_TOKEN)");
  cmd->add_option("--tp", o->request.tp, "tensor-parallel ranks per stage (default: automatic)")
      ->check(integer_in(1, 4096));
  cmd->add_option("--ep", o->request.ep,
                  "mixture-of-experts models: tensor-parallel ranks holding whole experts (default: automatic)")
      ->check(integer_in(1, 4096));
  cmd->add_option("--pp", o->request.pp, "pipeline stages (default: automatic)")->check(integer_in(1, 4096));
  cmd->add_option("--layers", o->layers, "layers per stage, e.g. 10,12,10")->delimiter(',');
  cmd->add_option("-c,--ctx", o->request.n_ctx, "KV cache positions per sequence")
      ->capture_default_str()
      ->check(integer_in(1, int64_t(1) << 24));
  cmd->add_option("--seqs", o->request.n_seq, "sequences decoded together")
      ->capture_default_str()
      ->check(integer_in(1, 4096));
  add_kv_type_option(*cmd, o->kv_type);
  cmd->add_option("--balance-margin", o->request.balance_margin,
                  "share of each tensor-parallel neighbour's FFN and output rows a rank also holds (0: none)")
      ->capture_default_str()
      ->check(finite_in(0, 0.5));
  cmd->add_option("--wire-type", o->wire_type, "activations on the wire: f32|f16|bf16|q8_0 (default: by link speed)")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0"}));
  cmd->add_flag("--force", o->request.force, "plan even when a node's memory is too small");
  cmd->callback([o] { plan(*o); });
}

}  // namespace shardlm::cli
