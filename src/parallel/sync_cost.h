// What one tensor-parallel all-reduce costs where the model runs it: after
// each rank computed its share of half a layer. The ranks rarely arrive
// together (their compute jitters, a core is lost for a moment, a waiter
// wakes late), so an all-reduce lasts the link's latency and bytes plus the
// wait for the slowest rank; with a compressed wire type, the encoding and
// decoding too. On a 2-core Zen 5 host the link model's 12 µs of an idle
// loopback exchange were 23-44 µs in a decode (docs/bench/plan8.md).
// Measured, not assumed: the planner takes it as the link's latency.
#pragma once

#include <cstddef>
#include <functional>

#include "comm/communicator.h"
#include "core/dtype.h"

namespace shardlm::parallel {

// Collective over `group`: `rounds` times, runs `compute`, then all-reduces
// `values` floats in `wire` (F32: Communicator::all_reduce; else
// WireAllReduce, as DistributedSession does). Returns the group's mean
// seconds per all-reduce (the same figure on every rank).
double measure_all_reduce_seconds(comm::Communicator& group, DType wire, size_t values, int rounds,
                                  const std::function<void(int round)>& compute);

}  // namespace shardlm::parallel
