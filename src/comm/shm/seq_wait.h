// Waiting on sequence words that live in a shared-memory segment.
//
// A waiter polls as comm/wait_policy.h says and then sleeps in a shared futex
// on the word, so more ranks than cores make progress instead of burning each
// other's time slices. The publisher only pays for a FUTEX_WAKE when someone
// announced it sleeps.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "comm/wait_policy.h"
#include "core/clock.h"

namespace shardlm::comm::shm {


// Sequence numbers wrap; "reached" is a signed distance so wrap is harmless.
inline bool seq_reached(uint32_t value, uint32_t target) { return int32_t(value - target) >= 0; }

// One 32-bit sequence word plus its sleeper count, alone on a cache line so
// that publishing it does not disturb neighbouring words.
struct alignas(64) SeqWord {
  uint32_t seq;
  uint32_t sleepers;
};
static_assert(sizeof(SeqWord) == 64);

uint32_t load_acquire(const SeqWord& w);
// Stores `value` with release order and wakes sleepers if there are any.
void publish(SeqWord& w, uint32_t value);
// FUTEX_WAKE if anyone announced it sleeps on w (after a seq_cst update).
void wake_sleepers(SeqWord& w);

struct WaitSpec {
  WaitPolicy policy;
  Deadline deadline;
  // Called while sleeping, at most every `check_every`; throws to abort the
  // wait (a peer died, the segment was poisoned). Also called once at the
  // deadline before the timeout error, so a death is reported as a death.
  std::function<void()> check;
  std::chrono::milliseconds check_every{10};
  // One line used in the timeout error, e.g. "rank 2 (all_reduce step 7)".
  std::function<std::string()> describe;
};

// Returns the observed value once seq_reached(value, target); throws
// shardlm::Error on timeout or when spec.check throws.
uint32_t wait_for(SeqWord& w, uint32_t target, const WaitSpec& spec);

}  // namespace shardlm::comm::shm
