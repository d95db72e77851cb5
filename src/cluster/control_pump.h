// The worker's side of a running job's control connection: one thread that
// sends heartbeats, reads what the coordinator sends (Heartbeat, Request,
// Abort) and watches for its silence. Whatever ends the job from there (an
// Abort, the coordinator gone or silent for peer_timeout) calls `fatal`, which
// does not return: the job's process exits, since its other threads may be
// blocked in the comm layer waiting for a peer that will never answer.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "cluster/protocol.h"

namespace shardlm::cluster {

class ControlPump {
 public:
  using Fatal = std::function<void(const std::string& why)>;
  ControlPump(Channel& channel, double peer_timeout_s, Fatal fatal);
  ~ControlPump();  // stops the thread (the channel stays open)
  ControlPump(const ControlPump&) = delete;
  ControlPump& operator=(const ControlPump&) = delete;

  // The driver's next Request frame, as long as it takes to come.
  Message next_request();

 private:
  void loop();

  Channel& ch_;
  double peer_timeout_s_;
  Fatal fatal_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Message> requests_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace shardlm::cluster
