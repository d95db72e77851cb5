// shardlm status --nodes ...: how each worker is (cluster/ask.h): address,
// version, CPU, memory, bandwidth, idle or busy (for whom, since when) and the
// slices in its cache. One line per worker on stdout (or JSON with --json);
// a worker that cannot be asked gets a line saying why, and the exit status is 1.
#include <fmt/format.h>

#include <cstdio>

#include "cli/cluster_token.h"
#include "cli/commands.h"
#include "cli/node_list.h"
#include "cluster/ask.h"
#include "core/error.h"

namespace shardlm::cli {
namespace {

struct StatusOptions {
  std::string nodes, hostfile, token_file;
  bool json = false;
};

void status(const StatusOptions& o) {
  const auto addresses = node_addresses(o.nodes, o.hostfile);
  const std::string token = cluster_token(o.token_file);
  nlohmann::json all = nlohmann::json::array();
  int failed = 0;
  for (const auto& address : addresses) {
    nlohmann::json info;
    try {
      info = cluster::ask_worker(address, token, cluster::kDefaultPeerTimeoutSeconds);
      info["address"] = address;
    } catch (const Error& e) {
      ++failed;
      info = {{"address", address}, {"state", "unreachable"}, {"error", e.what()}};
    }
    all.push_back(info);
    if (o.json) continue;
    if (info.contains("error")) {
      std::printf("%s  unreachable: %s\n", address.c_str(), info["error"].get<std::string>().c_str());
      continue;
    }
    uint64_t cached_bytes = 0;
    for (const auto& s : info.value("cached", nlohmann::json::array())) cached_bytes += s.value("bytes", uint64_t(0));
    const std::string state = info.value("state", "?") == "busy"
                                  ? fmt::format("busy (job from {} since {})", info.value("serving", "?"),
                                                info.value("since", "?"))
                                  : info.value("state", "?");
    std::printf("%s  %s  shardlm %s  %d cores, %.0f MiB available, %.1f GB/s  cpu: %s  cache: %zu slices, %.1f MiB\n",
                address.c_str(), state.c_str(), info.value("version", "?").c_str(), info.value("cores", 0),
                double(info.value("memory_bytes", int64_t(0))) / (1 << 20), info.value("bandwidth_gbs", 0.0),
                info.value("cpu", "?").c_str(), info.value("cached", nlohmann::json::array()).size(),
                double(cached_bytes) / (1 << 20));
  }
  if (o.json) std::printf("%s\n", all.dump(2).c_str());
  std::fflush(stdout);
  if (failed) throw Error(fmt::format("status: {} of {} workers could not be asked", failed, addresses.size()));
}

}  // namespace

void add_status(CLI::App& app) {
  auto o = std::make_shared<StatusOptions>();
  auto* cmd = app.add_subcommand("status", "ask workers how they are: version, CPU, memory, idle or busy, cache");
  cmd->add_option("--nodes", o->nodes, "host:port,host:port,...");
  cmd->add_option("--hostfile", o->hostfile, "one host:port per line");
  cmd->add_option("--token-file", o->token_file, "cluster token file (wins over $SHARDLM_TOKEN)");
  cmd->add_flag("--json", o->json, "print the workers' reports as JSON");
  cmd->callback([o] { status(*o); });
}

}  // namespace shardlm::cli
