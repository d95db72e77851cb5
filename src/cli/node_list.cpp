#include "cli/node_list.h"

#include <fmt/format.h>

#include <set>

#include "cli/usage.h"
#include "net/socket.h"
#include "parallel/nodes.h"

namespace shardlm::cli {

std::vector<std::string> node_addresses(const std::string& nodes, const std::string& hostfile) {
  if (!nodes.empty() && !hostfile.empty()) throw UsageError("--nodes and --hostfile: give one of them");
  if (nodes.empty() && hostfile.empty()) throw UsageError("--nodes: give the workers (or --hostfile)");
  const char* flag = nodes.empty() ? "--hostfile" : "--nodes";
  std::vector<parallel::NodeSpec> specs;
  try {
    specs = nodes.empty() ? parallel::nodes_from_hostfile(hostfile) : parallel::nodes_from_list(nodes);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& n : specs) {
    try {
      const auto hp = net::parse_host_port(n.name, flag);
      if (hp.port == 0) throw Error(fmt::format("{}: port 0 in '{}'", flag, n.name));
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (!seen.insert(n.name).second) throw UsageError(fmt::format("{}: '{}' is listed twice", flag, n.name));
    out.push_back(n.name);
  }
  return out;
}

}  // namespace shardlm::cli
