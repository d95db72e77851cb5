// The monotonic clock, deadlines on it, and elapsed time in seconds as a
// double: the one way timings, waits and silences are measured across the code.
#pragma once

#include <chrono>

namespace shardlm {

using SteadyClock = std::chrono::steady_clock;
// When a wait gives up: every blocking call of net, comm and cluster takes one.
using Deadline = SteadyClock::time_point;

inline double seconds_of(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }
inline double seconds_since(SteadyClock::time_point t) { return seconds_of(SteadyClock::now() - t); }
inline Deadline after_seconds(double s) {
  return SteadyClock::now() + std::chrono::duration_cast<SteadyClock::duration>(std::chrono::duration<double>(s));
}

}  // namespace shardlm
