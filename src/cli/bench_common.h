// What the model benchmarks share: the prompt they time, and the per-token
// breakdown of a distributed run's time (parallel::RankStats of one rank)
// that `bench dist` and `bench -m --nodes` print the same way.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/sampler.h"
#include "parallel/distributed_session.h"
#include "serve/engine.h"

namespace shardlm::cli {

// Token ids do not change the work; a fixed sequence keeps runs comparable.
inline std::vector<TokenId> bench_prompt_tokens(int n, int64_t n_vocab) {
  Rng rng(1234);
  std::vector<TokenId> prompt(size_t(std::max(n, 0)));
  for (auto& t : prompt) t = TokenId(rng.next() % uint64_t(n_vocab));
  return prompt;
}

// `s` spread over `steps` forward steps (or tokens): the columns of kBreakdownColumns.
struct StepBreakdown {
  double compute_ms = 0, collective_ms = 0, p2p_wait_ms = 0, other_ms = 0;
  double all_reduces = 0;           // per step
  double wire_bytes = 0;            // per token, all ranks
  double min_wire_bytes = 0;        // the plan's lower bound per token
};

inline StepBreakdown step_breakdown(const parallel::RankStats& s, double steps, double wire_bytes_per_token,
                                    double min_wire_bytes_per_token) {
  StepBreakdown b;
  const double per = steps > 0 ? 1e3 / steps : 0;
  b.compute_ms = std::max(0.0, s.forward_seconds - s.all_reduce_seconds) * per;
  b.collective_ms = std::max(0.0, s.collective_seconds) * per;
  b.p2p_wait_ms = std::max(0.0, s.p2p_wait_seconds) * per;
  b.other_ms = std::max(0.0, s.total_seconds * per - b.compute_ms - b.collective_ms - b.p2p_wait_ms);
  b.all_reduces = steps > 0 ? double(s.all_reduces) / steps : 0;
  b.wire_bytes = wire_bytes_per_token;
  b.min_wire_bytes = min_wire_bytes_per_token;
  return b;
}

inline constexpr const char* kBreakdownColumns =
    "compute ms | collective ms | p2p wait ms | other ms | all-reduces/token | wire B/token | min B/token";

inline std::string breakdown_cells(const StepBreakdown& b) {
  return fmt::format("{:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.2f} | {:.0f} | {:.0f}", b.compute_ms, b.collective_ms,
                     b.p2p_wait_ms, b.other_ms, b.all_reduces, b.wire_bytes, b.min_wire_bytes);
}

// Feeds `tokens` to slot 0 from position `pos` in steps of at most `batch`; the last entry samples.
inline TokenId feed(serve::Engine& engine, std::span<const TokenId> tokens, int32_t pos, int batch) {
  std::vector<serve::StepEntry> step;
  TokenId next = -1;
  for (size_t at = 0; at < tokens.size(); at += size_t(batch)) {
    step.clear();
    const size_t end = std::min(tokens.size(), at + size_t(batch));
    for (size_t i = at; i < end; ++i) step.push_back({0, pos + int32_t(i), tokens[i], i + 1 == tokens.size()});
    const auto got = engine.step(step);
    if (!got.empty()) next = got[0].token;
  }
  return next;
}

}  // namespace shardlm::cli
