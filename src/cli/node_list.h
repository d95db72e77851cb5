// The worker list of run, bench, plan and status: --nodes host:port,... or
// --hostfile (one host:port per line), exactly one of them. Every entry must
// be host:port with a port in 1..65535, and no entry may appear twice (two
// names for one worker are caught when they are resolved: cluster/dial.h).
#pragma once

#include <string>
#include <vector>

namespace shardlm::cli {

std::vector<std::string> node_addresses(const std::string& nodes, const std::string& hostfile);

}  // namespace shardlm::cli
