#include "comm/wait_policy.h"

#include <immintrin.h>
#include <sched.h>

namespace shardlm::comm {

WaitPolicy choose_wait_policy(int ranks_on_host, std::chrono::microseconds requested_spin) {
  WaitPolicy p;
  if (requested_spin.count() >= 0)
    p.spin = requested_spin;
  else
    p.yield = ranks_on_host <= usable_cpus() ? kOwnCoreYield : kSharedCoreYield;
  return p;
}

int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
}

Poller::Poller(const WaitPolicy& policy) {
  const auto now = Clock::now();
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
    const auto now = Clock::now();
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
