// Mixture-of-experts routing: which experts one token runs and with what
// weights, from its router logits (ffn_gate_inp · x). Pure and per token, so
// every rank of a distributed run computes the same choice.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace shardlm {

class ExpertRouter {
 public:
  explicit ExpertRouter(const MoeSpec& spec);

  // Writes spec.n_expert_used expert ids (best first; ties go to the lower
  // id) and their weights. bias: exp_probs_b or null.
  void route(const float* logits, const float* bias, int32_t* experts, float* weights);

 private:
  MoeSpec m_;
  std::vector<float> probs_, select_, group_score_;
};

}  // namespace shardlm
