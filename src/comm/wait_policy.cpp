#include "comm/wait_policy.h"

#include <fcntl.h>
#include <immintrin.h>
#include <sched.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "core/cpu.h"

namespace shardlm::comm {
namespace {

// Asked once: every wait consults it. A launcher's binding is settled before
// the first wait (cluster/mpi_job.cpp releases OpenMPI's default one first).
int rank_cpus() {
  static const int cpus = usable_cpus();
  return cpus;
}

}  // namespace

WaitPolicy choose_wait_policy(int ranks_on_host, int other_runnable, std::chrono::microseconds requested_spin,
                              double cpu_pressure) {
  WaitPolicy p;
  const bool waited = cpu_pressure < 0 || cpu_pressure >= kCrowdedPressure;
  if (requested_spin.count() >= 0) {
    p.spin = requested_spin;
  } else if (ranks_on_host + std::max(other_runnable, 0) > 2 * rank_cpus() && waited) {
    p.spin = kCrowdedSpin;  // more than two tasks a core
  } else if (ranks_on_host <= rank_cpus()) {
    p.spin = kOwnCoreSpin;
  } else {
    p.yield = kSharedCoreYield;
  }
  return p;
}

namespace {

std::atomic<int> g_runnable{-1};
std::atomic<double> g_pressure{-1};

// The whole of a small /proc file into `text` (NUL-terminated); false if unreadable.
bool read_proc(const char* path, char (&text)[256]) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return false;
  text[n] = '\0';
  return true;
}

// Re-reads /proc/loadavg and /proc/pressure/cpu at most every kLoadSampleEvery.
void sample_load() {
  static std::atomic<int64_t> sampled_at{0};
  constexpr int64_t kEvery = std::chrono::nanoseconds(kLoadSampleEvery).count();
  // Every wait asks: the coarse clock (the last tick, no TSC read) is precise
  // enough for a once-a-second sample and costs a fraction of the fine one.
  timespec coarse{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &coarse);
  const int64_t now = int64_t(coarse.tv_sec) * 1'000'000'000 + coarse.tv_nsec;
  int64_t last = sampled_at.load(std::memory_order_relaxed);
  // One thread re-reads; the others use the last sample.
  if (now - last < kEvery || !sampled_at.compare_exchange_strong(last, now)) return;
  // "0.50 0.40 0.30 3/345 12345": the 4th field is runnable/total.
  char text[256] = {};
  if (read_proc("/proc/loadavg", text)) {
    const char* slash = std::strchr(text, '/');
    const char* start = slash;
    while (start && start > text && start[-1] >= '0' && start[-1] <= '9') --start;
    if (slash && start < slash) g_runnable.store(std::atoi(start), std::memory_order_relaxed);
  }
  g_pressure.store(read_proc("/proc/pressure/cpu", text) ? parse_cpu_pressure(text) : -1,
                   std::memory_order_relaxed);
}

}  // namespace

double parse_cpu_pressure(const char* text) {
  // "some avg10=1.23 avg60=... total=...\nfull avg10=..."
  const char* some = std::strstr(text, "some ");
  const char* avg10 = some ? std::strstr(some, "avg10=") : nullptr;
  if (!avg10) return -1;
  char* end = nullptr;
  const double v = std::strtod(avg10 + 6, &end);
  return end != avg10 + 6 && v >= 0 && v <= 100 ? v : -1;
}

int runnable_tasks() {
  sample_load();
  return g_runnable.load(std::memory_order_relaxed);
}

double cpu_pressure() {
  sample_load();
  return g_pressure.load(std::memory_order_relaxed);
}

WaitPolicy WaitRule::now() const {
  sample_load();  // once for both figures: every wait asks
  const int runnable = g_runnable.load(std::memory_order_relaxed);
  // Assume our ranks are all among the runnable ones (they are while they poll).
  const int others = runnable < 0 ? 0 : std::max(0, runnable - ranks_on_host_);
  return choose_wait_policy(ranks_on_host_, others, requested_spin_, g_pressure.load(std::memory_order_relaxed));
}

Poller::Poller(const WaitPolicy& policy) {
  const auto now = SteadyClock::now();
  spin_end_ = now + policy.spin;
  yield_end_ = spin_end_ + policy.yield;
  yielding_ = policy.spin.count() <= 0;
  blocking_ = yielding_ && policy.yield.count() <= 0;
}

bool Poller::poll_again() {
  if (blocking_) return false;
  // Reading the clock costs more than a look at a shared word, so a spinner
  // reads it every 16th look; a yield costs more than the clock (and may
  // give the core away for a while), so a yielder reads it every time.
  if (yielding_ || (++looks_ & 15) == 0) {
    const auto now = SteadyClock::now();
    if (now >= yield_end_) {
      blocking_ = true;
      return false;
    }
    yielding_ = now >= spin_end_;
  }
  if (yielding_)
    sched_yield();
  else
    _mm_pause();
  return true;
}

}  // namespace shardlm::comm
