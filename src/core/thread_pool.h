// Persistent worker pool for kernels: threads are created once; between jobs
// they spin briefly, then sleep, so several processes sharing few cores do not
// starve each other.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace shardlm {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // n_threads includes the calling thread
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // Bytes a thread will read soon (see run).
  struct Prefetch {
    const void* data = nullptr;
    size_t bytes = 0;
  };
  // Runs fn(thread_index, n_threads) on every thread (the caller is thread 0)
  // and returns when all are done. `then` (empty, or one per thread): once
  // its part is done, thread i prefetches then[i] into L2, a worker after it
  // has reported done (until the next job comes), the caller only while it
  // waits for the workers. A thread that would idle at the end of a job and
  // through the caller's work before the next one thus streams the start of
  // what it reads next.
  void run(const std::function<void(int ith, int nth)>& fn, std::span<const Prefetch> then = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm
