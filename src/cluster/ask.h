// Asking workers how they are without giving them a job: connect,
// authenticate, read the Info (cluster/protocol.h), close. `shardlm status`
// prints it; `shardlm plan --nodes` and the coordinator plan from it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "parallel/nodes.h"

namespace shardlm::cluster {

// The worker's Info message. Throws Error naming "worker <address>".
nlohmann::json ask_worker(const std::string& address, const std::string& token);
// What the planner needs from an Info message. Throws Error naming the
// worker when it speaks another protocol (kProtocol) or the Info is malformed.
parallel::NodeSpec node_from_info(const std::string& address, const nlohmann::json& info);

}  // namespace shardlm::cluster
