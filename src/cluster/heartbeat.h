// Liveness of a job's control connections. Both ends send a Heartbeat frame
// every peer_timeout / 6 from a thread of their own, so a step that computes
// for minutes still beats; whoever hears nothing (no frame of any kind) from
// a peer for peer_timeout declares it dead. A process that is stopped, a
// frozen machine or a network split are all silent; a killed process is an
// EOF, noticed at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "cluster/protocol.h"

namespace shardlm::cluster {

constexpr double kDefaultPeerTimeoutSeconds = 3.0;
inline double heartbeat_interval(double peer_timeout_s) { return peer_timeout_s / 6; }

// Sends a Heartbeat on each channel every `interval_s` until destroyed. A
// channel whose send fails is skipped from then on (its reader notices).
class HeartbeatSender {
 public:
  HeartbeatSender(std::vector<Channel*> channels, double interval_s);
  ~HeartbeatSender();
  HeartbeatSender(const HeartbeatSender&) = delete;
  HeartbeatSender& operator=(const HeartbeatSender&) = delete;

 private:
  void loop();

  std::vector<Channel*> channels_;
  std::vector<bool> failed_;
  std::chrono::duration<double> interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace shardlm::cluster
