// Running a small shm world inside one test: ranks as threads (each with its
// own mapping of the segment) or as forked processes (for crash tests).
#pragma once

#include <unistd.h>

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "comm/communicator.h"
#include "comm/shm_transport.h"

namespace shardlm::comm::testing {

// A session name no other test (or concurrent test binary) uses.
inline std::string unique_session(const std::string& what) {
  static std::atomic<int> counter{0};
  return what + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++);
}

inline ConnectOptions shm_options(const std::string& session, int rank, int size) {
  ConnectOptions o;
  o.backend = "shm";
  o.rank = rank;
  o.size = size;
  o.coordinator = session;
  o.token = "test-token";
  o.cluster_id = "shm-tests";
  o.timeouts.op = std::chrono::milliseconds(20'000);
  o.timeouts.connect = std::chrono::milliseconds(10'000);
  return o;
}

inline std::shared_ptr<Communicator> shm_world(const ConnectOptions& o, CommConfig config) {
  config.timeouts = o.timeouts;
  return Communicator::create(std::make_unique<shm::ShmTransport>(o), config);
}

// Runs body(rank) on `size` threads; rethrows the first failure after all end.
inline void run_ranks(int size, const std::function<void(int)>& body) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r)
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace shardlm::comm::testing
