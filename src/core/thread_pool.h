// Persistent worker pool for kernels: threads are created once; between jobs
// they spin briefly, then sleep, so several processes sharing few cores do not
// starve each other.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

namespace shardlm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads includes the calling thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Runs fn(thread_index, n_threads) on every thread (the caller is thread 0)
  // and returns when all are done.
  void run(const std::function<void(int ith, int nth)>& fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm
