// What the coordinator and the driving worker (world rank 1 = rank 0 of the
// workers' communicator) exchange on the driver's control connection while a
// job runs (cluster/protocol.h): a Request frame is one step of the workers'
// engine, parallel::StepMessage::encode() (sequence adds and frees, the
// step's entries; a Mark closes a stats period, a Shutdown ends the job);
// the driver answers every step but the Shutdown with one Token frame: the
// sampled tokens as parallel::SlotToken records, in entry order.
#pragma once

#include <cstddef>
#include <cstdint>

#include "parallel/step_message.h"

namespace shardlm::cluster {

constexpr size_t kMaxStepBytes = size_t(64) << 20;  // decode() checks the content against the job's limits
constexpr size_t kMaxTokensPerFrame = 65536;       // one per entry of a step at most
constexpr size_t kMaxReportedRequests = 1024;      // stats periods a worker keeps for its Status done

}  // namespace shardlm::cluster
