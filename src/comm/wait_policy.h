// How every backend (shm, tcp, mpi) waits for a peer: poll without blocking
// for a while, then sleep in the OS. The one rule lives here.
//
// Waking a sleeping process costs 20-25 us+ on the 2-vCPU VMs we measure on
// (futex or poll wake-up plus a reschedule), several times a 16 KiB exchange
// (2.5-3 us over shm when both ranks poll). So when every rank of this host
// can own a core, a waiter busy-polls long enough to cover the gaps inside a
// collective and between back-to-back collectives (kOwnCoreSpin), and only
// then sleeps. When ranks outnumber cores, busy-polling would burn the time
// slice the peer needs to make progress: a waiter polls with sched_yield()
// between looks for a short while (the peer it yields to is often the one it
// waits for), then sleeps. Figures: docs/BENCHMARKS.md "Collectives".
#pragma once

#include <chrono>
#include <cstdint>

namespace shardlm::comm {

struct WaitPolicy {
  std::chrono::nanoseconds spin{0};   // busy-poll (pause between looks)
  std::chrono::nanoseconds yield{0};  // then poll with sched_yield() between looks
};

inline constexpr std::chrono::microseconds kOwnCoreSpin{2000};
inline constexpr std::chrono::microseconds kSharedCoreYield{200};

// `requested_spin` >= 0 (Timeouts::spin set by the user) replaces the rule:
// busy-poll exactly that long, no yield phase. Otherwise the rule above, for
// `ranks_on_host` ranks sharing usable_cpus() cores.
WaitPolicy choose_wait_policy(int ranks_on_host, std::chrono::microseconds requested_spin);

// CPUs this process may run on (sched_getaffinity); at least 1.
int usable_cpus();

// One wait: call poll_again() after every look that found nothing. It pauses
// or yields as the phase says and returns true while the caller should look
// again, false once it is time to block in the OS (and from then on).
class Poller {
 public:
  explicit Poller(const WaitPolicy& policy);
  bool poll_again();

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point spin_end_, yield_end_;
  uint32_t looks_ = 0;
  bool yielding_ = false;
  bool blocking_ = false;
};

}  // namespace shardlm::comm
