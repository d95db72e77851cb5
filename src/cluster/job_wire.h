// What the coordinator (world rank 0) and the driving worker (world rank 1 =
// rank 0 of the workers' communicator) exchange over the job's communicator.
#pragma once

#include <cstddef>
#include <cstdint>

#include "model/sampler.h"

namespace shardlm::cluster {

// A job runs requests until one with n_tokens == 0 (no prompt follows it).
constexpr uint32_t kTagRequest = 7001;  // coordinator → driver: WireRequest, then the prompt tokens
constexpr uint32_t kTagToken = 7002;    // driver → coordinator: WireToken per generated token
constexpr int32_t kMaxPromptTokens = 1 << 24;
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
