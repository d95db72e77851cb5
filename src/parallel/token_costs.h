// What a decode step costs besides streaming the matrices, per token: the
// element-wise work of every layer (norms, residual adds, rotary embedding,
// the gated activation), the store of its key and value rows into the cache
// (first writes: the cache's pages are faulted in as positions fill them)
// and attention over the cached context. All grow with the tokens of a step
// (sequences decoded together), which kernel rates alone miss: on Zen 5 with
// Llama-3.2-1B they were 0.6 ms of a 21 ms token and 3.9 ms of a 27 ms step
// of 4 sequences at context 40, the KV store a third of it (docs/bench/plan8.md). Measured on the node (workers at start, `bench dist`
// locally) with the kernels the model runs, in units that do not depend on a
// model's shape, so the planner scales them to any model's layers.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace shardlm::parallel {

struct TokenCosts {
  double vector_ns = 0;     // per value of layer_vector_values (below)
  double kv_store_ns = 0;   // per byte of key and value rows written to fresh cache pages
  double attention_ns = 0;  // per query head × cached position × (dim_k + dim_v), f32 cache
  bool empty() const { return vector_ns <= 0 && kv_store_ns <= 0 && attention_ns <= 0; }

  // {"vector_ns": x, "kv_store_ns": y, "attention_ns": z}; from_json rejects (Error naming
  // `who`) anything else: a missing, negative or absurd figure, an unknown key.
  nlohmann::json to_json() const;
  static TokenCosts from_json(const nlohmann::json& j, const std::string& who);
};

// The values one token's element-wise work in one layer touches, the unit of
// vector_ns: two norms and two residual adds over n_embd, rotary embedding
// of the query and key dims and the gated activation over ff_rows (gate
// and up).
double layer_vector_values(int64_t n_embd, int64_t q_dims, int64_t kv_dims, int64_t ff_rows);

// Times those kernels on one layer of a Llama-3.2-1B shape (width 2048, 32
// query heads and 8 KV heads of 64, ff 8192; the KV store of 16 such layers
// into memory mapped fresh for each pass, every (layer, head) its own run of
// positions as in model/kv_cache.h; attention over 256 cached positions): the
// median of a few passes, on the calling thread (the model runs them on one
// thread per token).
TokenCosts measure_token_costs();

}  // namespace shardlm::parallel
