// How every backend (shm, tcp, mpi) waits for a peer: poll without blocking
// for a while, then sleep in the OS. The one rule lives here.
//
// Sleeping is slow to undo: waking a process (futex or poll wake-up plus a
// reschedule) costs several times a small shm exchange between two polling
// ranks. But polling only pays while the peer gets to run: on a crowded host
// a spinner burns the time slice its peer needs, and a sched_yield() can hand
// the core to an unrelated task for a whole slice. Hence, at the start of each
// wait, with R our ranks on this host, O other runnable tasks (/proc/loadavg,
// sampled at most once a second: a decode step waits dozens of times and
// should not touch the file system) and C usable cores:
//   * R + O > 2C (more than two tasks a core) while tasks have been waiting
//     for a CPU (/proc/pressure/cpu "some avg10" ≥ kCrowdedPressure, or
//     unknown): busy-poll kCrowdedSpin (as the thread pool does: a peer a
//     few microseconds behind costs no sleep and wake-up, a descheduled one
//     little CPU), then block. The count is one instant's, which a burst of
//     short tasks can tip for a second; the pressure is the last 10 s's
//     share of time some task waited for a core, so with it low a spinner
//     takes no core that anyone needed;
//   * else R <= C: busy-poll up to kOwnCoreSpin, then block;
//   * else (our ranks outnumber cores): poll with sched_yield() (the core
//     goes to another rank, often the one awaited) for kSharedCoreYield,
//     then block.
// The measurements behind these choices: docs/BENCHMARKS.md "Collectives".
#pragma once

#include <chrono>
#include <cstdint>

#include "core/clock.h"

namespace shardlm::comm {

struct WaitPolicy {
  std::chrono::nanoseconds spin{0};   // busy-poll (pause between looks)
  std::chrono::nanoseconds yield{0};  // then poll with sched_yield() between looks
};

inline constexpr std::chrono::microseconds kOwnCoreSpin{2000};
inline constexpr std::chrono::microseconds kSharedCoreYield{200};
inline constexpr std::chrono::microseconds kCrowdedSpin{50};
inline constexpr double kCrowdedPressure = 10;  // % of the last 10 s

// The rule above for `ranks_on_host` ranks on usable_cpus() cores (core/cpu.h,
// asked once), given `other_runnable` tasks that are not ours and the CPU
// pressure in % (< 0: unknown). `requested_spin` >= 0 (Timeouts::spin set by
// the user) replaces it: busy-poll that long, block.
WaitPolicy choose_wait_policy(int ranks_on_host, int other_runnable, std::chrono::microseconds requested_spin,
                              double cpu_pressure = -1);

// Runnable tasks on the host (/proc/loadavg), re-read at most every
// kLoadSampleEvery; -1 when unknown.
inline constexpr std::chrono::seconds kLoadSampleEvery{1};
int runnable_tasks();
// /proc/pressure/cpu "some avg10" (%), sampled with runnable_tasks(); -1
// when unknown (no PSI: older kernels, some containers).
double cpu_pressure();
// The "avg10=" figure of a /proc/pressure/cpu text's "some" line; -1 if none.
double parse_cpu_pressure(const char* text);

// What a transport keeps: its ranks on this host and the user's spin; now()
// applies the rule with the current load.
class WaitRule {
 public:
  WaitRule(int ranks_on_host = 1, std::chrono::microseconds requested_spin = std::chrono::microseconds(-1))
      : ranks_on_host_(ranks_on_host), requested_spin_(requested_spin) {}
  WaitPolicy now() const;

 private:
  int ranks_on_host_;
  std::chrono::microseconds requested_spin_;
};

// One wait: call poll_again() after every look that found nothing. It pauses
// or yields as the phase says and returns true while the caller should look
// again, false once it is time to block in the OS (and from then on).
class Poller {
 public:
  explicit Poller(const WaitPolicy& policy);
  bool poll_again();

 private:
  SteadyClock::time_point spin_end_, yield_end_;
  uint32_t looks_ = 0;
  bool yielding_ = false;
  bool blocking_ = false;
};

}  // namespace shardlm::comm
