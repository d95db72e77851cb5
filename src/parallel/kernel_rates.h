// How fast this node's matmul kernels stream weights: GB/s of weight bytes
// per weight type and token-count class, measured (workers at start, `bench
// dist` locally) and handed to the planner, whose speed model divides each
// rank's weight bytes by these rates instead of by the raw memory bandwidth
// (most decode kernels are bound by instructions before bandwidth).
//
// Measured at 1, 2, 4 and 8 tokens (decode, batched decode and pipeline
// micro-batches of 2-3, of 4-7, and the prefill tiles from 8); other counts
// interpolate the time per byte linearly in the tokens between the measured
// counts and extend the last two beyond them, since past a few tokens the
// batched kernels' time grows by the same amount per token.
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
namespace gguf {
class File;
}
}

namespace shardlm::parallel {

struct KernelRates {
  std::map<std::pair<DType, int>, double> gbs;  // (type, measured tokens) → GB/s

  // GB/s for this type at this many tokens (see above); 0 when not measured.
  double rate(DType type, int64_t tokens) const;
  bool empty() const { return gbs.empty(); }

  // {"Q4_0": [GB/s at 1, 2, 4, 8 tokens], ...}; from_json also reads the
  // older [at 1, 2, 8], ignores unknown types and rejects (Error naming `who`)
  // anything else malformed.
  nlohmann::json to_json() const;
  static KernelRates from_json(const nlohmann::json& j, const std::string& who);
};

// Weight types worth measuring when the model is not known yet (a worker at start).
std::vector<DType> common_weight_types();
// The types of a model's matmul weights (token_embd only as a tied output matrix).
std::vector<DType> matmul_weight_types(const gguf::File& file);

// A matrix size whose rates are those of a model's weights: twice the last
// level cache (a model streams from memory; rates measured in a large L3 were
// up to 1.6× too fast), at least `at_least`, at most 1 GiB.
size_t streamed_matrix_bytes(size_t at_least);

// Matvec per type and token count with `pool` (null: one thread), the median
// of a few passes over copies of one transformer layer's matrices (width
// 2048, or narrower where a layer exceeds `matrix_bytes`) up to
// `matrix_bytes`, each on the layout a model's matrix of the type gets here
// (make_model_bench_matrix: repacked panels where those pay): the rates of
// the kernels a model runs, on its mix of shapes, with each call's setup.
// `ranks_at_once` > 1: the rate of one of that many ranks on this host that
// compute at the same time (a stage's tensor-parallel ranks; `bench dist`
// adds the pipeline stages when micro-batches overlap), each with
// pool's thread count and `matrix_bytes` of its own (each rank streams its
// own share, and the ranks' cores need not share a last level cache), since
// they share the host's memory bandwidth and caches (on a 2-core VM two
// streaming threads get ~1.5x one thread's bytes, not 2x). `tp_group`:
// the measurers in turn make groups of that many tensor-parallel ranks
// (ranks_at_once a multiple of it), which, where each has a core, meet after
// each layer copy's attention output and FFN down as the ranks do at their
// all-reduces, so the rate counts the waits for whichever is late (tp 2 on
// the 1B Q4_0 here: plan / measured 1.06 against 1.11 on average, 38 of 40
// rows within ±20 % against 30; docs/BENCHMARKS.md, fortieth session).
KernelRates measure_kernel_rates(const std::vector<DType>& types, ThreadPool* pool, size_t matrix_bytes,
                                 int ranks_at_once = 1, int tp_group = 1);

}  // namespace shardlm::parallel
