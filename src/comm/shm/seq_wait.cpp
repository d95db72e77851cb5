#include "comm/shm/seq_wait.h"

#include <fmt/format.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <ctime>
#include <optional>

#include "core/error.h"

namespace shardlm::comm::shm {
namespace {

// Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
long futex(uint32_t* word, int op, uint32_t value, const timespec* timeout) {
  return syscall(SYS_futex, word, op, value, timeout, nullptr, 0);
}

void sleep_on(uint32_t* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{};
  ts.tv_sec = time_t(timeout.count() / 1'000'000'000);
  ts.tv_nsec = long(timeout.count() % 1'000'000'000);
  // EAGAIN (word already changed), EINTR and ETIMEDOUT all mean "look again".
  futex(word, FUTEX_WAIT, expected, &ts);
}

}  // namespace

uint32_t load_acquire(const SeqWord& w) {
  return std::atomic_ref<const uint32_t>(w.seq).load(std::memory_order_acquire);
}

void publish(SeqWord& w, uint32_t value) {
  // seq_cst store + seq_cst load pair with the sleeper's increment-then-recheck
  // below: either the sleeper sees the new value or we see its announcement.
  std::atomic_ref<uint32_t>(w.seq).store(value, std::memory_order_seq_cst);
  wake_sleepers(w);
}

void wake_sleepers(SeqWord& w) {
  if (std::atomic_ref<uint32_t>(w.sleepers).load(std::memory_order_seq_cst) != 0)
    futex(&w.seq, FUTEX_WAKE, INT_MAX, nullptr);
}

uint32_t wait_for(SeqWord& w, uint32_t target, const WaitSpec& spec) {
  std::atomic_ref<uint32_t> seq(w.seq);
  uint32_t v = seq.load(std::memory_order_acquire);
  if (seq_reached(v, target)) return v;

  const auto start = SteadyClock::now();
  for (Poller poller(spec.policy); poller.poll_again();) {
    v = seq.load(std::memory_order_acquire);
    if (seq_reached(v, target)) return v;
  }

  // A peer publishes and may then leave (or die) before this waiter looks
  // again: what it published before still counts. Its leaving is stored
  // after its publish, so once the check has seen it, the word shows the
  // publish if there was one (rank 1 of two failed the last barrier of a
  // run with "rank 0 left" when it looked late). check() returns the word
  // when a failed check finds the target reached after all.
  const auto check = [&]() -> std::optional<uint32_t> {
    if (!spec.check) return std::nullopt;
    try {
      spec.check();
    } catch (...) {
      const uint32_t now = seq.load(std::memory_order_acquire);
      if (seq_reached(now, target)) return now;
      throw;
    }
    return std::nullopt;
  };
  std::atomic_ref<uint32_t> sleepers(w.sleepers);
  auto last_check = start;
  for (;;) {
    const auto now = SteadyClock::now();
    if (spec.check && now - last_check >= spec.check_every) {
      last_check = now;
      if (const auto reached = check()) return *reached;
    }
    if (now >= spec.deadline) {
      if (const auto reached = check()) return *reached;
      const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count();
      throw Error(fmt::format("shm: timed out after {} ms waiting for {}", waited,
                              (spec.describe ? spec.describe() : std::string("a peer"))));
    }
    const auto slice = std::min<std::chrono::nanoseconds>(spec.deadline - now, spec.check_every);
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    v = seq.load(std::memory_order_seq_cst);
    if (!seq_reached(v, target)) sleep_on(&w.seq, v, slice);
    sleepers.fetch_sub(1, std::memory_order_seq_cst);
    v = seq.load(std::memory_order_acquire);
    if (seq_reached(v, target)) return v;
  }
}

}  // namespace shardlm::comm::shm
