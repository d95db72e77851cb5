// Runs a function as N forked ranks of one TCP world on loopback, with an
// OS-chosen coordinator port, and collects what each rank reported. The
// gtest process itself has no threads when it forks; each child connects,
// runs the body, and _exits.
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "comm/communicator.h"

namespace shardlm::comm::testing {

struct RankOutcome {
  bool exited = false;   // exited normally (else killed by a signal)
  int exit_code = -1;    // 0 = body returned, 1 = body threw
  int signal = 0;
  std::string output;    // body's return value, or the exception message
  std::string log;       // the rank's stderr (spdlog lines)
  double seconds = 0;    // wall time from connect to exit, as measured by the rank
  bool ok() const { return exited && exit_code == 0; }
};

struct RunOptions {
  std::chrono::milliseconds op_timeout{10000};
  std::chrono::milliseconds connect_timeout{10000};
  CommConfig config = CommConfig{};
  std::function<std::string(int rank)> token = [](int) { return std::string("test-token"); };
  // Called in the parent after rank 0 was forked, before the others (e.g. to
  // throw garbage at the coordinator port first).
  std::function<void(uint16_t port)> before_others;
  // Ranks the parent kills once all the other ranks have exited (stalled ranks).
  std::vector<int> may_hang;
  std::chrono::seconds give_up{60};  // then everything left is killed
};

using Body = std::function<std::string(Communicator& comm)>;
std::vector<RankOutcome> run_ranks(int n, const Body& body, const RunOptions& options = {});

// Values over twelve orders of magnitude, the same for the same seed: sums
// of them depend on the order of their additions.
inline std::vector<float> wild_values(uint32_t seed, size_t count) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> expo(-6, 6);
  std::vector<float> v(count);
  for (auto& x : v) x = mant(rng) * std::pow(10.f, float(expo(rng)));
  return v;
}

// Throws (failing the rank) when cond is false; the message is only
// formatted then, so it is cheap inside loops.
inline void require(bool cond, const std::string& what) {
  if (!cond) throw std::runtime_error(what);
}
#define RANK_REQUIRE(cond, ...) \
  do {                          \
    if (!(cond)) throw std::runtime_error(fmt::format(__VA_ARGS__)); \
  } while (0)

// Summary for gtest messages: one line per rank.
std::string describe(const std::vector<RankOutcome>& outcomes);

// FNV-1a of a buffer, as hex: compact enough to send back through the pipe.
std::string digest(const void* data, size_t bytes);

}  // namespace shardlm::comm::testing
