// Mixture-of-experts FFN (mul_mat_id style): every token of the batch is
// routed first, then each expert that any token chose runs once over the
// gathered tokens, so its weights are read once per step; experts no token
// chose are never read. A token's result does not depend on the other tokens
// of the batch: experts are summed in expert order.
//
// Distributed, every rank routes every token the same way (the router reads
// the replicated normed hidden state) and runs only the experts it holds, or
// its row slice of each: its sum is a partial sum of the layer's output, which
// the FFN all-reduce completes as it does a dense FFN's.
#include <cstring>

#include "core/matmul.h"
#include "core/ops.h"
#include "model/model.h"

namespace shardlm {

void Model::expert_ffn(const LayerWeights& L) {
  const auto& c = config_;
  const auto& m = c.moe;
  const auto& E = L.experts;
  const int64_t n = n_tokens_, k = m.n_expert_used, d = c.n_embd;

  PreparedInput normed(xn_.data(), n, d);
  matmul(E.router, normed, router_logits_.data(), opt_.pool);
  for (int64_t t = 0; t < n; ++t)
    router_->route(&router_logits_[size_t(t * m.n_expert)], E.selection_bias, &expert_ids_[size_t(t * k)],
                   &expert_weights_[size_t(t * k)]);

  std::memset(proj_.data(), 0, size_t(n * d) * sizeof(float));
  std::vector<int64_t> slots;  // (token · k + choice) of the tokens routed to one expert
  for (int64_t e = plan_.experts.begin; e < plan_.experts.end; ++e) {
    slots.clear();
    for (int64_t i = 0; i < n * k; ++i)
      if (expert_ids_[size_t(i)] == e) slots.push_back(i);
    if (slots.empty()) continue;
    const int64_t rows = int64_t(slots.size());
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(&expert_in_[size_t(r * d)], &xn_[size_t(slots[size_t(r)] / k * d)], size_t(d) * sizeof(float));
    PreparedInput in(expert_in_.data(), rows, d);  // quantized once for gate and up
    matmul(E.gate.expert(e), in, expert_gate_.data(), opt_.pool);
    matmul(E.up.expert(e), in, expert_up_.data(), opt_.pool);
    ops::swiglu(expert_gate_.data(), expert_up_.data(), expert_gate_.data(), rows * E.gate.rows_per_expert);
    matmul(E.down.expert(e), expert_gate_.data(), rows, expert_out_.data(), opt_.pool);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t slot = slots[size_t(r)];
      ops::axpy(expert_weights_[size_t(slot)], &expert_out_[size_t(r * d)], &proj_[size_t(slot / k * d)], d);
    }
  }

  if (E.shared_gate.data) {
    const int64_t ff = E.shared_gate.rows;
    matmul(E.shared_gate, normed, gate_.data(), opt_.pool);
    matmul(E.shared_up, normed, up_.data(), opt_.pool);
    ops::swiglu(gate_.data(), up_.data(), gate_.data(), n * ff);
    matmul(E.shared_down, gate_.data(), n, expert_out_.data(), opt_.pool);
    ops::add(proj_.data(), expert_out_.data(), proj_.data(), n * d);
  }
}

}  // namespace shardlm
