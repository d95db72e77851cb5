#include "cluster/heartbeat.h"

#include "core/error.h"

namespace shardlm::cluster {

HeartbeatSender::HeartbeatSender(std::vector<Channel*> channels, double interval_s)
    : channels_(std::move(channels)), failed_(channels_.size(), false), interval_(interval_s) {
  thread_ = std::thread([this] { loop(); });
}

HeartbeatSender::~HeartbeatSender() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HeartbeatSender::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    for (size_t i = 0; i < channels_.size(); ++i) {
      if (failed_[i]) continue;
      try {
        // A short deadline: a peer that stopped reading must not stall the others' beats.
        channels_[i]->send_heartbeat(after_seconds(interval_.count()));
      } catch (const Error&) {
        failed_[i] = true;
      }
    }
    if (cv_.wait_for(lock, interval_, [this] { return stop_; })) return;
  }
}

}  // namespace shardlm::cluster
