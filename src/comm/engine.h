// Shared by a world communicator and all its splits: the transport, the
// config, and one execution order. Blocking calls run on the caller's thread
// once queued async work has drained; async calls run FIFO on one progress
// thread started on first use (so a process that only forks ranks and uses
// blocking calls never has a second thread).
#pragma once

#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/communicator.h"

namespace shardlm::comm {

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
};

class Engine {
 public:
  Engine(std::unique_ptr<Transport> transport, CommConfig config);
  ~Engine();

  Transport& transport() { return *transport_; }
  const CommConfig& config() const { return config_; }
  // Only at creation, before any operation (Communicator::agree_on_tuning).
  void drop_tuning() { config_.tuning.reset(); }
  Deadline deadline() const { return Clock::now() + config_.timeouts.op; }

  // Runs `op` now, in order after all submitted work. An Error fails the
  // transport (so peers hear of it) and is rethrown.
  void run(const std::function<void()>& op);
  Work submit(std::function<void()> op);

 private:
  void execute(const std::function<void()>& op);
  void progress_loop();

  std::unique_ptr<Transport> transport_;
  CommConfig config_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::function<void()>, std::shared_ptr<Work::State>>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace shardlm::comm
