// Elapsed time on the monotonic clock, in seconds as a double: the one way
// timings and silences are measured across the code.
#pragma once

#include <chrono>

namespace shardlm {

using SteadyClock = std::chrono::steady_clock;

inline double seconds_of(SteadyClock::duration d) { return std::chrono::duration<double>(d).count(); }
inline double seconds_since(SteadyClock::time_point t) { return seconds_of(SteadyClock::now() - t); }

}  // namespace shardlm
