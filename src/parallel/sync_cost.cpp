#include "parallel/sync_cost.h"

#include <vector>

#include "core/clock.h"
#include "parallel/wire_all_reduce.h"

namespace shardlm::parallel {

double measure_all_reduce_seconds(comm::Communicator& group, DType wire, size_t values, int rounds,
                                  const std::function<void(int round)>& compute) {
  std::vector<float> data(values, 1.0f / float(group.size()));
  WireAllReduce compressed(wire);
  auto all_reduce = [&] {
    if (wire == DType::F32)
      group.all_reduce(data.data(), values, DType::F32);
    else
      compressed.run(group, data.data(), 1, values);
  };
  all_reduce();  // the first exchange sets up the links' buffers
  double seconds = 0;
  for (int i = 0; i < rounds; ++i) {
    compute(i);
    const auto t0 = SteadyClock::now();
    all_reduce();
    seconds += seconds_since(t0);
  }
  // Every rank's mean, so every rank plans with the same figure.
  float mean = float(seconds / double(rounds) / double(group.size()));
  group.all_reduce(&mean, 1, DType::F32);
  return double(mean);
}

}  // namespace shardlm::parallel
