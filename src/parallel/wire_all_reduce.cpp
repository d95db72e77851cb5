#include "parallel/wire_all_reduce.h"

#include <algorithm>

#include "parallel/wire_format.h"

namespace shardlm::parallel {

double WireAllReduce::run(comm::Communicator& group, float* data, size_t rows, size_t n) {
  const size_t ranks = size_t(group.size());
  const size_t block = rows * wire_row_bytes(wire_, n), values = rows * n;
  mine_.resize(block);
  all_.resize(block * ranks);
  decoded_.resize(values);
  wire_encode(wire_, data, rows, n, mine_.data());
  group.all_gather(mine_.data(), all_.data(), block);
  wire_decode(wire_, all_.data(), rows, n, data);
  for (size_t r = 1; r < ranks; ++r) {
    wire_decode(wire_, all_.data() + r * block, rows, n, decoded_.data());
    for (size_t i = 0; i < values; ++i) data[i] += decoded_[i];
  }
  return double(ranks - 1) * double(block);
}

}  // namespace shardlm::parallel
