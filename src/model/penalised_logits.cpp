#include "model/penalised_logits.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/ops.h"

namespace shardlm {
namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

}  // namespace

PenalisedLogits::PenalisedLogits(const SamplerParams& p, std::span<const TokenId> recent, std::vector<TokenId>& seen,
                                 TokenId first, std::span<const float> logits)
    : first_(first), raw_(logits) {
  // apply_penalties asks for each token once, in increasing id order, and uses
  // each reference before asking for the next one.
  apply_penalties(p, recent, seen, first, TokenId(first + int64_t(logits.size())), [&](TokenId id) -> float& {
    penalised_.push_back({id, logits[size_t(id - first)]});
    return penalised_.back().logit;
  });
}

template <class Segment, class Single>
void PenalisedLogits::for_each_piece(Segment&& segment, Single&& single) const {
  size_t begin = 0;
  for (const TokenLogit& t : penalised_) {
    const size_t at = size_t(t.id - first_);
    if (at > begin) segment(begin, at);
    single(at, t.logit);
    begin = at + 1;
  }
  if (raw_.size() > begin) segment(begin, raw_.size());
}

TokenLogit PenalisedLogits::best() const {
  size_t best = 0;
  float best_logit = kMinusInf;
  // Pieces come in position order, so a strict compare keeps the lowest id.
  const auto consider = [&](size_t at, float logit) {
    if (logit > best_logit) {
      best = at;
      best_logit = logit;
    }
  };
  for_each_piece(
      [&](size_t begin, size_t end) {
        const size_t at = begin + size_t(ops::argmax(raw_.data() + begin, int64_t(end - begin)));
        consider(at, raw_[at]);
      },
      consider);
  if (best_logit == kMinusInf) {  // nothing above -inf: the first id, as it stands
    best = 0;
    best_logit = !penalised_.empty() && penalised_[0].id == first_ ? penalised_[0].logit : raw_[0];
  }
  return {TokenId(first_ + int64_t(best)), best_logit};
}

// Keeps a buffer of candidates; whenever it fills, the best k stay and the
// k-th's logit becomes a floor that later positions must beat strictly (a
// later position with an equal logit has a higher id, so it ranks below the
// k-th). Most of the vocabulary is then skipped by a vector compare.
void PenalisedLogits::top(size_t k, std::vector<TokenLogit>& out) const {
  out.clear();
  k = std::min(k, raw_.size());
  if (k == 0) return;
  const size_t capacity = std::max<size_t>(2 * k, 1024);
  out.reserve(capacity);
  bool have_floor = false;
  float floor = 0;
  const auto offer = [&](size_t at, float logit) {
    if (have_floor && !(logit > floor)) return;
    out.push_back({TokenId(first_ + int64_t(at)), logit});
    if (out.size() < capacity) return;
    std::nth_element(out.begin(), out.begin() + std::ptrdiff_t(k - 1), out.end(), ranks_before);
    out.resize(k);
    floor = rank_of(out[k - 1].logit);
    have_floor = true;
  };
  for_each_piece(
      [&](size_t begin, size_t end) {
        for (size_t i = begin; i < end; ++i) {
          if (have_floor) {
            i += size_t(ops::find_above(raw_.data() + i, int64_t(end - i), floor));
            if (i == end) break;
          }
          offer(i, raw_[i]);
        }
      },
      offer);
  const size_t keep = std::min(k, out.size());
  std::partial_sort(out.begin(), out.begin() + std::ptrdiff_t(keep), out.end(), ranks_before);
  out.resize(keep);
}

}  // namespace shardlm
