// Asking workers how they are without giving them a job: connect,
// authenticate, read the Info (cluster/protocol.h), close. `shardlm status`
// prints it; `shardlm plan --nodes` and the coordinator plan from it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "parallel/nodes.h"

namespace shardlm::cluster {

// How long a worker that ends a job may take before its Info (it waits up to
// a second for that job rather than answer "busy").
constexpr double kInfoGraceSeconds = 1.5;

// The worker's Info message, within timeout_s (+ kInfoGraceSeconds for the
// Info). Throws Error naming "worker <address>".
nlohmann::json ask_worker(const std::string& address, const std::string& token, double timeout_s);
// What the planner needs from an Info message. Throws Error naming the
// worker when it speaks another protocol (kProtocol) or the Info is malformed.
parallel::NodeSpec node_from_info(const std::string& address, const nlohmann::json& info);

}  // namespace shardlm::cluster
