// The cluster token for run, bench, plan, status and worker: an explicit
// --token-file wins over $SHARDLM_TOKEN (a missing or empty file is an error,
// never silently replaced by the environment); without one, the environment.
#pragma once

#include <string>

namespace shardlm::cli {
std::string cluster_token(const std::string& token_file);
}  // namespace shardlm::cli
