// What a world communicator and all its splits share: the transport, the
// config, and the lock that lets one operation at a time into the transport
// (so calls from several threads run one after another, in a total order).
#pragma once

#include <memory>
#include <mutex>

#include "comm/communicator.h"
#include "comm/scratch.h"
#include "core/error.h"

namespace shardlm::comm {

class WorldState {
 public:
  WorldState(std::unique_ptr<Transport> transport, CommConfig config)
      : transport_(std::move(transport)), config_(std::move(config)) {}

  Transport& transport() { return *transport_; }
  const CommConfig& config() const { return config_; }
  // Only at creation, before any operation (Communicator::agree_on_tuning).
  void drop_tuning() { config_.tuning.reset(); }
  Deadline deadline() const { return SteadyClock::now() + config_.timeouts.op; }
  // The algorithms' working memory; only inside run().
  Scratch& scratch() { return scratch_; }

  // Runs `op` alone on the transport. An Error fails the transport (so the
  // peers hear of it) and is rethrown.
  template <class Op>
  void run(Op&& op) {
    std::lock_guard lock(mu_);
    try {
      op();
    } catch (const Error& e) {
      transport_->abort(e.what());
      throw;
    }
  }

 private:
  std::unique_ptr<Transport> transport_;
  CommConfig config_;
  Scratch scratch_;
  std::mutex mu_;
};

}  // namespace shardlm::comm
