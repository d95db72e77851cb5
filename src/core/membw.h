// Memory-read bandwidth of this machine: the ceiling for memory-bound kernels
// (decode matvec) and a figure each node reports to the planner.
#pragma once

#include <cstddef>

namespace shardlm {

class ThreadPool;

// A buffer size the caches cannot hold, so that reading it measures DRAM:
// twice the largest cache sysconf reports, and at least 512 MiB. A fixed
// 512 MiB is not enough everywhere: on a host with a 480 MiB L3 it read 4 %
// faster at two threads than 1 or 2 GiB did (part of it stayed in the L3),
// which raised the decode bound `bench -m` measures against.
size_t dram_probe_bytes();

// Reads a buffer of `bytes` (make it ≫ the last-level cache to measure DRAM)
// `repeats` times with every thread of `pool` (null: one thread), each thread
// a contiguous slice, and returns the best rate in GB/s (10^9 bytes/s). The
// buffer and the reads are like a model's weights and the decode kernels'
// (2 MiB pages, several streams per thread, prefetched), so the figure is
// what those kernels can stream, not what a naive loop gets.
double measure_read_bandwidth(size_t bytes, ThreadPool* pool, int repeats);

// Reads `size` bytes once, split across the pool; returns a value that depends
// on every byte so the reads cannot be optimised away.
unsigned long long read_all(const void* data, size_t size, ThreadPool* pool);

}  // namespace shardlm
