// A slice of logits as the sampler sees them after its penalties, without a
// copy of the vocabulary: the raw logits are read in place and only the
// penalised tokens (at most penalty_window) are held aside. Greedy and top-k
// choose from it directly; building a candidate per vocabulary entry and
// sorting them cost several times the model's other per-sequence work.
#pragma once

#include <span>
#include <vector>

#include "model/logprobs.h"
#include "model/sampler.h"

namespace shardlm {

class PenalisedLogits {
 public:
  // The logits of ids [first, first + logits.size()) after p's penalties over
  // `recent` (as apply_penalties; `seen` is its scratch). Keeps a view of logits.
  PenalisedLogits(const SamplerParams& p, std::span<const TokenId> recent, std::vector<TokenId>& seen,
                  TokenId first, std::span<const float> logits);

  // The greedy choice: the highest penalised logit, the lowest id among
  // equals, NaN never (ops::argmax's rules; the first id when nothing is
  // above -inf), with its penalised logit. The slice must not be empty.
  TokenLogit best() const;

  // The min(k, size) best into `out` (replaced), best first: higher logit,
  // then lower id; NaN ranks with -inf.
  void top(size_t k, std::vector<TokenLogit>& out) const;

 private:
  // Calls segment(begin, end) for each run of unpenalised positions and
  // single(position, logit) for each penalised one, in position order.
  template <class Segment, class Single>
  void for_each_piece(Segment&& segment, Single&& single) const;

  TokenId first_;
  std::span<const float> raw_;
  std::vector<TokenLogit> penalised_;  // increasing id
};

}  // namespace shardlm
