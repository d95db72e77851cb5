// How every backend (shm, tcp, mpi) waits for a peer: poll without blocking
// for a while, then sleep in the OS. The one rule lives here.
//
// Sleeping is slow to undo: waking a process costs 20-25 us+ on the 2-vCPU
// VMs we measure on (futex or poll wake-up plus a reschedule), several times
// a 16 KiB exchange (2.5-3 us over shm when both ranks poll). So a waiter
// polls first. It polls with sched_yield() between looks rather than busy
// spinning: on an idle core sched_yield returns at once, but when the core is
// shared (more ranks than cores, or a machine busy with other work) a busy
// spinner burns the time slice the peer it waits for needs. Measured on the
// shared 2-vCPU VM with 4 compilers running (16 KiB f32 all_reduce, median):
// 2 ranks shm: busy spin 2 ms 7.5 us .. 5.9 ms (bimodal), spin 50 us 114 us,
// yield 2 ms 7.6-12.7 us; 4 ranks: yield 26 us, block at once 45-54 us.
// Polling lasts kOwnCoreYield when every rank of this host can have a core,
// kSharedCoreYield when ranks outnumber cores (same latency measured, less
// CPU burnt by idle waiters). Figures: docs/BENCHMARKS.md "Collectives".
#pragma once

#include <chrono>
#include <cstdint>

namespace shardlm::comm {

struct WaitPolicy {
  std::chrono::nanoseconds spin{0};   // busy-poll (pause between looks)
  std::chrono::nanoseconds yield{0};  // then poll with sched_yield() between looks
};

inline constexpr std::chrono::microseconds kOwnCoreYield{2000};
inline constexpr std::chrono::microseconds kSharedCoreYield{200};

// `requested_spin` >= 0 (Timeouts::spin set by the user) replaces the rule:
// busy-poll exactly that long, then block. Otherwise the rule above, for
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
