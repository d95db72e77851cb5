#include "core/thread_pool.h"

#include <fmt/format.h>
#include <immintrin.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"

namespace shardlm {
namespace {

// A job takes tens of microseconds to a few milliseconds; spinning about that
// long catches the next job without a syscall, and the bound keeps a spinning
// thread from stealing a shared core from the thread it waits for for long.
constexpr auto kSpinTime = std::chrono::microseconds(80);

uint32_t* futex_word(std::atomic<uint32_t>& a) {
  static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));
  return reinterpret_cast<uint32_t*>(&a);
}

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// Waits until done(word) holds: spins for kSpinTime, then sleeps on the futex.
// `sleepers` counts threads that may be asleep on `word`, so that a writer
// makes the wake-up syscall only when someone needs it (all seq_cst: either
// the sleeper sees the new value or the writer sees the sleeper).
template <class Done>
uint32_t await(std::atomic<uint32_t>& word, std::atomic<uint32_t>& sleepers, Done done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpinTime;
  for (unsigned i = 1;; ++i) {
    const uint32_t v = word.load(std::memory_order_acquire);
    if (done(v)) return v;
    _mm_pause();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
  }
  for (;;) {
    sleepers.fetch_add(1);
    const uint32_t v = word.load();
    if (!done(v)) futex_wait(word, v);
    sleepers.fetch_sub(1);
    const uint32_t now = word.load(std::memory_order_acquire);
    if (done(now)) return now;
  }
}

// Prefetches p's bytes into L2, a line at a time, until stop() (asked every
// 4 KiB) says to give up.
template <class Stop>
void prefetch_until(const ThreadPool::Prefetch& p, Stop stop) {
  const auto* bytes = static_cast<const char*>(p.data);
  for (size_t at = 0; at < p.bytes; at += 64) {
    if (at % 4096 == 0 && stop()) return;
    _mm_prefetch(bytes + at, _MM_HINT_T1);
  }
}

}  // namespace

struct ThreadPool::Impl {
  int n_threads = 1;
  std::vector<std::thread> workers;
  const std::function<void(int, int)>* job = nullptr;
  std::span<const Prefetch> then;  // the job's, read before reporting done
  bool stopping = false;           // published by the generation bump

  alignas(64) std::atomic<uint32_t> generation{0};
  alignas(64) std::atomic<uint32_t> worker_sleepers{0};
  alignas(64) std::atomic<uint32_t> pending{0};  // workers still running the job
  alignas(64) std::atomic<uint32_t> caller_sleepers{0};
  std::atomic<bool> busy{false};

  std::mutex error_mutex;
  std::exception_ptr first_error;

  void record_error(std::exception_ptr e) {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = std::move(e);
  }

  void publish(const std::function<void(int, int)>* j) {
    job = j;
    pending.store(uint32_t(n_threads - 1), std::memory_order_relaxed);
    generation.fetch_add(1);
    if (worker_sleepers.load() > 0) futex_wake_all(generation);
  }

  void worker_loop(int ith) {
    uint32_t seen = 0;
    for (;;) {
      seen = await(generation, worker_sleepers, [seen](uint32_t g) { return g != seen; });
      if (stopping) return;
      try {
        (*job)(ith, n_threads);
      } catch (...) {
        record_error(std::current_exception());
      }
      const Prefetch next = then.empty() ? Prefetch{} : then[size_t(ith)];
      if (pending.fetch_sub(1) == 1 && caller_sleepers.load() > 0) futex_wake_all(pending);
      prefetch_until(next, [&] { return generation.load(std::memory_order_relaxed) != seen; });
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(std::make_unique<Impl>()) {
  if (n_threads < 1 || n_threads > 1024) throw Error(fmt::format("thread count {} is out of range 1..1024", n_threads));
  impl_->n_threads = n_threads;
  impl_->workers.reserve(size_t(n_threads - 1));
  for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this, i] { impl_->worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  impl_->stopping = true;
  impl_->publish(nullptr);
  for (auto& t : impl_->workers) t.join();
}

int ThreadPool::size() const { return impl_->n_threads; }

void ThreadPool::run(const std::function<void(int ith, int nth)>& fn, std::span<const Prefetch> then) {
  Impl& p = *impl_;
  if (p.n_threads == 1) {
    fn(0, 1);
    return;
  }
  if (!then.empty() && then.size() != size_t(p.n_threads))
    throw std::logic_error("ThreadPool::run: one prefetch a thread");
  if (p.busy.exchange(true)) throw std::logic_error("ThreadPool::run called while a job is running");
  p.first_error = nullptr;
  p.then = then;
  p.publish(&fn);
  try {
    fn(0, p.n_threads);
  } catch (...) {
    p.record_error(std::current_exception());
  }
  if (!then.empty())
    prefetch_until(then[0], [&] { return p.pending.load(std::memory_order_relaxed) == 0; });
  await(p.pending, p.caller_sleepers, [](uint32_t left) { return left == 0; });
  p.busy.store(false);
  if (p.first_error) std::rethrow_exception(p.first_error);
}

}  // namespace shardlm
