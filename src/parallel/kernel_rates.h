// How fast this node's matmul kernels stream weights: GB/s of weight bytes
// per weight type and token-count class, measured (workers at start, `bench
// dist` locally) and handed to the planner, whose speed model divides each
// rank's weight bytes by these rates instead of by the raw memory bandwidth
// (most decode kernels are bound by instructions before bandwidth).
//
// Classes: 1 token (decode), 2 tokens (stands for 2-3: batched decode,
// pipeline micro-batches), 8 tokens (stands for ≥ 4: the prefill tiles).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"

namespace shardlm {
class ThreadPool;
}

namespace shardlm::parallel {

struct KernelRates {
  std::map<std::pair<DType, int>, double> gbs;  // (type, class tokens) → GB/s

  static int token_class(int64_t tokens) { return tokens <= 1 ? 1 : tokens <= 3 ? 2 : 8; }
  // GB/s for this type at this many tokens; 0 when not measured.
  double rate(DType type, int64_t tokens) const;
  bool empty() const { return gbs.empty(); }

  // {"Q4_0": [gbs at 1, at 2, at 8], ...}; from_json ignores unknown types and
  // rejects (Error naming `who`) anything else malformed.
  nlohmann::json to_json() const;
  static KernelRates from_json(const nlohmann::json& j, const std::string& who);
};

// Weight types worth measuring when the model is not known yet (a worker at start).
std::vector<DType> common_weight_types();

// Matvec over a `matrix_bytes` matrix per type and class with `pool` (null:
// one thread), best of a few calls.
KernelRates measure_kernel_rates(const std::vector<DType>& types, ThreadPool* pool, size_t matrix_bytes);

}  // namespace shardlm::parallel
