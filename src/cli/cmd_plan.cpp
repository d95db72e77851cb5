// shardlm plan: the layout a model would get over some nodes, with memory and
// a speed prediction, computed without touching the network.
#include <fmt/format.h>

#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/gguf.h"
#include "parallel/planner.h"
#include "parallel/wire_format.h"

namespace shardlm::cli {
namespace {

struct PlanOptions {
  std::string model, nodes, hostfile, describe, layers, kv_type = "f32", wire_type;
  parallel::PlanRequest request;
};

std::vector<int64_t> parse_layers(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long long v = std::stoll(item, &used);
      if (used != item.size()) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw Error(fmt::format("--layers: '{}' is not a number (expected e.g. 10,12,10)", item));
    }
  }
  return out;
}

void plan(PlanOptions o) {
  const int sources = !o.nodes.empty() + !o.hostfile.empty() + !o.describe.empty();
  if (sources != 1) throw Error("plan: give exactly one of --nodes, --hostfile, --describe");
  const auto nodes = !o.nodes.empty()      ? parallel::nodes_from_list(o.nodes)
                     : !o.hostfile.empty() ? parallel::nodes_from_hostfile(o.hostfile)
                                           : parallel::nodes_from_json_file(o.describe);
  if (!o.layers.empty()) o.request.layers = parse_layers(o.layers);
  if (o.kv_type == "f16") o.request.kv_type = DType::F16;
  else if (o.kv_type != "f32") throw Error(fmt::format("--kv-type: '{}' is not f32 or f16", o.kv_type));
  if (!o.wire_type.empty()) o.request.wire_type = parallel::wire_type_from_name(o.wire_type);
  auto file = gguf::File::open(o.model);
  const auto p = parallel::make_plan(*file, nodes, o.request);
  std::fputs(p.describe(ModelConfig::from_gguf(*file)).c_str(), stdout);
}

}  // namespace

void add_plan(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  auto* cmd = app.add_subcommand("plan", "print the tp × pp layout, memory and predicted speed over some nodes");
  cmd->add_option("-m,--model", o->model, "GGUF model")->required();
  cmd->add_option("--nodes", o->nodes, "host:port,host:port,... (default node figures)");
  cmd->add_option("--hostfile", o->hostfile, "one host[:port] per line");
  cmd->add_option("--describe", o->describe, "JSON description of (hypothetical) nodes");
  cmd->add_option("--tp", o->request.tp, "tensor-parallel ranks per stage (default: automatic)");
  cmd->add_option("--pp", o->request.pp, "pipeline stages (default: automatic)");
  cmd->add_option("--layers", o->layers, "layers per stage, e.g. 10,12,10");
  cmd->add_option("--ctx", o->request.n_ctx, "KV cache positions per sequence")->capture_default_str();
  cmd->add_option("--seqs", o->request.n_seq, "sequences decoded together")->capture_default_str();
  cmd->add_option("--kv-type", o->kv_type, "f32|f16")->capture_default_str();
  cmd->add_option("--wire-type", o->wire_type, "activations on the wire: f32|f16|bf16|q8_0 (default: by link speed)");
  cmd->add_flag("--force", o->request.force, "plan even when a node's memory is too small");
  cmd->callback([o] { plan(*o); });
}

}  // namespace shardlm::cli
