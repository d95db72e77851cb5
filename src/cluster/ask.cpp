#include "cluster/ask.h"

#include <fmt/format.h>

#include "cluster/dial.h"
#include "cluster/protocol.h"
#include "core/error.h"
#include "parallel/nodes.h"

namespace shardlm::cluster {

nlohmann::json ask_worker(const std::string& address, const std::string& token, double timeout_s) {
  return open_worker_channel(address, token, timeout_s)
      ->expect_json(MsgType::Info, after_seconds(timeout_s + kInfoGraceSeconds));
}

parallel::NodeSpec node_from_info(const std::string& address, const nlohmann::json& info) {
  parallel::NodeSpec n = parallel::default_node(address);
  try {
    // Absent from the builds before the field: they spoke protocol 1.
    const int64_t protocol = info.contains("protocol") ? info.at("protocol").get<int64_t>() : 1;
    if (protocol != kProtocol)
      throw Error(fmt::format("worker {} speaks cluster protocol {} (shardlm {}), this build {}: run the same shardlm "
                              "build on every node",
                              address, protocol, info.value("version", std::string("?")), kProtocol));
    n.memory_bytes = info.at("memory_bytes").get<int64_t>();
    n.cores = std::max(1, info.at("cores").get<int>());
    const double bw = info.at("bandwidth_gbs").get<double>();
    if (bw > 0) n.memory_bandwidth_gbs = bw;
    // Absent from workers older than the kernel-rate speed model.
    if (info.contains("kernel_rates"))
      n.kernel_rates = parallel::KernelRates::from_json(info.at("kernel_rates"), "worker " + address);
    if (info.contains("token_costs"))  // absent from workers older than the token-cost term
      n.token_costs = parallel::TokenCosts::from_json(info.at("token_costs"), "worker " + address);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("worker {}: malformed Info message: {}", address, e.what()));
  }
  return n;
}

}  // namespace shardlm::cluster
