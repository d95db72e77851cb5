// The tensor-parallel all-reduce with a compressed payload (F16, BF16, Q8_0;
// parallel/wire_format.h). F32 goes to Communicator::all_reduce unchanged.
//
// Algorithm ("gather the encodings, sum in rank order"), for `rows` rows of
// `n` floats on each of the group's ranks:
//   1. every rank encodes its own contribution once (row by row);
//   2. all_gather of the encodings: every rank holds the same n_ranks blocks
//      of bytes;
//   3. every rank decodes block 0, 1, ..., n_ranks−1 — its own block too, from
//      its encoded bytes — and adds them in that order in f32.
// Every rank therefore runs the same arithmetic on the same bytes and ends
// with bit-identical results; each contribution is rounded once and the sum
// is never re-rounded. A rank sends (n_ranks − 1) encoded contributions
// (direct exchange), which at 2 ranks is the minimum a reduce-scatter +
// all-gather would send too; beyond 2 ranks that pair would send
// 2 (n_ranks − 1) / n_ranks instead (not done: tp > 2 over slow links is rare).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "comm/communicator.h"

namespace shardlm::parallel {

class WireAllReduce {
 public:
  explicit WireAllReduce(DType wire) : wire_(wire) {}
  // In place over `group`; returns the bytes this rank put on the wire.
  double run(comm::Communicator& group, float* data, size_t rows, size_t n);

 private:
  DType wire_;
  std::vector<uint8_t> mine_, all_;
  std::vector<float> decoded_;
};

}  // namespace shardlm::parallel
