// What the coordinator and the driving worker (world rank 1 = rank 0 of the
// workers' communicator) exchange on the driver's control connection, as
// Request and Token frames (cluster/protocol.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/sampler.h"

namespace shardlm::cluster {

// A job runs requests until one with n_tokens == 0 (no prompt follows it).
constexpr int32_t kMaxPromptTokens = 1 << 24;
constexpr size_t kMaxTokensPerFrame = 4096;
constexpr size_t kMaxReportedRequests = 1024;  // per-request stats a worker keeps for its Status done

struct WireRequest {
  int32_t n_predict = 0, eos = -1;
  int32_t n_tokens = 0;
  SamplerParams sampling;  // checked where the request is run (DistributedSession::generate)
};

struct WireToken {
  int32_t seq = 0;  // -1: the request is over
  int32_t token = -1;
};

}  // namespace shardlm::cluster
