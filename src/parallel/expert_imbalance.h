// The routing imbalance whole-expert placement is expected to suffer: with
// experts placed whole on the ranks of a tensor-parallel group, a step's
// (token, expert) pairs fall unevenly on the ranks, and the group's
// all-reduce waits for the busiest. Top-8 of 128 experts over 2 ranks puts
// 4 and 4 on them in only ~28 % of the tokens.
#pragma once

#include <cstdint>
#include <vector>

namespace shardlm::parallel {

// E[pairs on the busiest rank] / (tokens · n_used / ranks) for one step of
// `tokens` tokens, each choosing n_used distinct experts of n_expert
// uniformly and independently (routing of unseen text taken as uniform),
// where rank r holds `held[r]` consecutive experts (Σ held = n_expert).
// 1 means perfectly balanced. A deterministic computation (fixed-seed
// sampling, ~0.5 % standard error): the same arguments give the same value
// on every machine.
double expected_busiest_share(int64_t n_expert, int64_t n_used, const std::vector<int64_t>& held, int64_t tokens);

}  // namespace shardlm::parallel
