#include <gtest/gtest.h>

#include <atomic>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/thread_pool.h"

namespace shardlm {
namespace {

TEST(ThreadPool, EveryThreadRunsEveryJobOnce) {
  for (int n : {1, 2, 3}) {
    ThreadPool pool(n);
    EXPECT_EQ(pool.size(), n);
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    constexpr int kRuns = 1000;
    for (int run = 0; run < kRuns; ++run) {
      pool.run([&](int ith, int nth) {
        ASSERT_EQ(nth, n);
        calls[size_t(ith)].fetch_add(1);
      });
    }
    for (int i = 0; i < n; ++i) EXPECT_EQ(calls[size_t(i)].load(), kRuns) << "thread " << i;
  }
}

TEST(ThreadPool, WorkIsVisibleToTheCallerAfterRun) {
  ThreadPool pool(2);
  std::vector<int> out(2);
  for (int run = 0; run < 500; ++run) {
    pool.run([&](int ith, int) { out[size_t(ith)] = run * 10 + ith; });
    ASSERT_EQ(out[0], run * 10);
    ASSERT_EQ(out[1], run * 10 + 1);
  }
}

TEST(ThreadPool, WorkerExceptionIsRethrownAndPoolSurvives) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.run([](int ith, int) {
    if (ith == 1) throw std::runtime_error("worker failed");
  }),
               std::runtime_error);
  EXPECT_THROW(pool.run([](int ith, int) {
    if (ith == 0) throw std::logic_error("caller failed");
  }),
               std::logic_error);
  EXPECT_THROW(pool.run([](int, int) { throw std::runtime_error("all failed"); }), std::runtime_error);
  std::atomic<int> count{0};
  pool.run([&](int, int) { count.fetch_add(1); });
  EXPECT_EQ(count.load(), 2);
}

TEST(ThreadPool, SleepsAndWakesAfterIdle) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  for (int i = 0; i < 3; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // past the spin window
    pool.run([&](int, int) { count.fetch_add(1); });
  }
  EXPECT_EQ(count.load(), 6);
}

// Several pools (as several processes would) sharing the two cores must all
// finish: waiters spin only briefly, then sleep.
TEST(ThreadPool, OversubscribedPoolsMakeProgress) {
  std::vector<std::thread> owners;
  std::atomic<long> total{0};
  for (int p = 0; p < 4; ++p) {
    owners.emplace_back([&] {
      ThreadPool pool(2);
      for (int run = 0; run < 300; ++run) pool.run([&](int, int) { total.fetch_add(1); });
    });
  }
  for (auto& t : owners) t.join();
  EXPECT_EQ(total.load(), 4 * 300 * 2);
}

// Prefetching after a job changes nothing the jobs see: every job still runs
// once on every thread (a worker still prefetching a long range takes the
// next job), and a `then` that is not one a thread is refused, the pool
// staying usable.
TEST(ThreadPool, PrefetchesAfterAJobLeaveTheJobsAsTheyWere) {
  const std::vector<char> far(size_t(16) << 20, 1);
  for (int n : {2, 3}) {
    ThreadPool pool(n);
    const std::vector<ThreadPool::Prefetch> then(size_t(n), {far.data(), far.size()});
    std::vector<std::atomic<int>> calls(static_cast<size_t>(n));
    constexpr int kRuns = 300;
    for (int run = 0; run < kRuns; ++run) pool.run([&](int ith, int) { calls[size_t(ith)].fetch_add(1); }, then);
    EXPECT_THROW(pool.run([](int, int) {}, std::span(then).first(1)), std::logic_error);
    pool.run([&](int ith, int) { calls[size_t(ith)].fetch_add(1); });
    for (int i = 0; i < n; ++i) EXPECT_EQ(calls[size_t(i)].load(), kRuns + 1) << "thread " << i;
  }
}

TEST(ThreadPool, RejectsBadSizeAndReentry) {
  EXPECT_THROW(ThreadPool(0), Error);
  ThreadPool pool(2);
  EXPECT_THROW(pool.run([&](int ith, int) {
    if (ith == 0) pool.run([](int, int) {});
  }),
               std::logic_error);
}

}  // namespace
}  // namespace shardlm
