#include "parallel/step_message.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "core/error.h"

namespace shardlm::parallel {
namespace {

class Writer {
 public:
  void i32(int32_t v) { raw(&v, sizeof v); }
  void u64(uint64_t v) { raw(&v, sizeof v); }
  void f32(float v) { raw(&v, sizeof v); }
  void raw(const void* p, size_t n) {
    if (n == 0) return;  // p may be null then
    const size_t at = out.size();
    out.resize(at + n);
    std::memcpy(out.data() + at, p, n);
  }
  std::vector<uint8_t> out;
};

class Reader {
 public:
  Reader(std::span<const uint8_t> b, const std::string& who, const char* message = "step message")
      : b_(b), who_(who), message_(message) {}
  int32_t i32(const char* what) {
    int32_t v = 0;
    raw(&v, sizeof v, what);
    return v;
  }
  uint64_t u64(const char* what) {
    uint64_t v = 0;
    raw(&v, sizeof v, what);
    return v;
  }
  float f32(const char* what) {
    float v = 0;
    raw(&v, sizeof v, what);
    return v;
  }
  void raw(void* p, size_t n, const char* what) {
    if (n == 0) return;  // p may be null then
    if (b_.size() - at_ < n)
      throw Error(fmt::format("{}: {} of {} bytes ends inside its {} (byte {})", who_, message_, b_.size(), what, at_));
    std::memcpy(p, b_.data() + at_, n);
    at_ += n;
  }
  bool done() const { return at_ == b_.size(); }

 private:
  std::span<const uint8_t> b_;
  size_t at_ = 0;
  const std::string& who_;
  const char* message_;
};

void write_sampler_params(Writer& w, const SamplerParams& p) {
  for (const float f : {p.temperature, p.top_p, p.min_p, p.repeat_penalty, p.presence_penalty, p.frequency_penalty}) w.f32(f);
  w.i32(p.top_k);
  w.i32(p.penalty_window);
  w.u64(p.seed);
  w.i32(p.logprobs);
  w.i32(int32_t(p.logit_bias.size()));
  for (const TokenBias& b : p.logit_bias) {
    w.i32(b.id);
    w.f32(b.bias);
  }
}

SamplerParams read_sampler_params(Reader& r, int64_t n_vocab, const std::string& who) {
  SamplerParams p;
  for (float* f : {&p.temperature, &p.top_p, &p.min_p, &p.repeat_penalty, &p.presence_penalty, &p.frequency_penalty})
    *f = r.f32("sampling parameters");
  p.top_k = r.i32("top-k");
  p.penalty_window = r.i32("penalty window");
  p.seed = r.u64("seed");
  p.logprobs = r.i32("log-probabilities asked");
  const int32_t n = r.i32("logit bias count");
  if (n < 0 || size_t(n) > kMaxLogitBias)
    throw Error(fmt::format("{}: {} biased tokens, at most {}", who, n, kMaxLogitBias));
  for (int32_t i = 0; i < n; ++i) {
    const TokenId id = r.i32("biased token");
    const float bias = r.f32("logit bias");
    if (id < 0 || id >= n_vocab || (!p.logit_bias.empty() && id <= p.logit_bias.back().id))
      throw Error(fmt::format("{}: biased token {} outside the vocabulary of {} or out of order", who, id, n_vocab));
    p.logit_bias.push_back({id, bias});
  }
  check_sampler_params(p, who);
  return p;
}

}  // namespace

void check_sampler_params(const SamplerParams& p, const std::string& what) {
  const float fs[] = {p.temperature, p.top_p, p.min_p, p.repeat_penalty, p.presence_penalty, p.frequency_penalty};
  for (const float f : fs)
    if (!std::isfinite(f)) throw Error(fmt::format("{}: a sampling parameter is not finite", what));
  if (p.repeat_penalty <= 0) throw Error(fmt::format("{}: repeat penalty {} must be positive", what, p.repeat_penalty));
  if (p.penalty_window < 0 || p.penalty_window > (1 << 24))
    throw Error(fmt::format("{}: penalty window {} is outside [0, 2^24]", what, p.penalty_window));
  if (p.logprobs < -1 || p.logprobs > kMaxTopLogprobs)
    throw Error(fmt::format("{}: {} top log-probabilities asked, outside [-1, {}]", what, p.logprobs, kMaxTopLogprobs));
  for (const TokenBias& b : p.logit_bias)
    if (!std::isfinite(b.bias)) throw Error(fmt::format("{}: the logit bias of token {} is not finite", what, b.id));
}

std::vector<uint8_t> StepMessage::encode() const {
  Writer w;
  w.i32(int32_t(kind));
  w.i32(int32_t(ops.size()));
  w.i32(int32_t(entries.size()));
  for (const SeqOp& op : ops) {
    w.i32(op.add ? 1 : 0);
    w.i32(op.slot);
    if (!op.add) continue;
    write_sampler_params(w, op.params);
    w.i32(int32_t(op.recent.size()));
    w.raw(op.recent.data(), op.recent.size() * sizeof(TokenId));
  }
  for (const BatchEntry& e : entries.entries) {
    w.i32(e.seq);
    w.i32(e.pos);
    w.i32(e.token);
    w.i32(e.want_logits ? 1 : 0);
  }
  return std::move(w.out);
}

StepMessage StepMessage::decode(std::span<const uint8_t> bytes, int64_t n_slots, int64_t max_entries, int64_t n_ctx,
                                int64_t n_vocab, const std::string& who) {
  Reader r(bytes, who);
  StepMessage m;
  const int32_t kind = r.i32("kind");
  if (kind < int32_t(StepKind::Step) || kind > int32_t(StepKind::Shutdown))
    throw Error(fmt::format("{}: step message of unknown kind {}", who, kind));
  m.kind = StepKind(kind);
  const int32_t n_ops = r.i32("operation count"), n_entries = r.i32("entry count");
  if (n_ops < 0 || n_ops > 4 * n_slots + 16)
    throw Error(fmt::format("{}: step message with {} sequence operations for {} slots", who, n_ops, n_slots));
  if (n_entries < 0 || n_entries > max_entries)
    throw Error(fmt::format("{}: step message with {} entries, at most {} per step", who, n_entries, max_entries));
  const auto check_slot = [&](int32_t slot) {
    if (slot < 0 || slot >= n_slots) throw Error(fmt::format("{}: step message names slot {} of {}", who, slot, n_slots));
  };
  for (int32_t i = 0; i < n_ops; ++i) {
    SeqOp op;
    op.add = r.i32("operation") != 0;
    op.slot = r.i32("operation slot");
    check_slot(op.slot);
    if (op.add) {
      op.params = read_sampler_params(r, n_vocab, who);
      const int32_t n = r.i32("kept prefix length");
      if (n < 0 || n > op.params.penalty_window || n >= n_ctx)
        throw Error(fmt::format("{}: {} kept tokens for a penalty window of {}", who, n, op.params.penalty_window));
      op.recent.resize(size_t(n));
      r.raw(op.recent.data(), op.recent.size() * sizeof(TokenId), "kept tokens");
      for (const TokenId t : op.recent)
        if (t < 0 || t >= n_vocab) throw Error(fmt::format("{}: kept token {} outside the vocabulary of {}", who, t, n_vocab));
    }
    m.ops.push_back(std::move(op));
  }
  int sampling = 0;
  for (int32_t i = 0; i < n_entries; ++i) {
    BatchEntry e;
    e.seq = r.i32("entry slot");
    e.pos = r.i32("entry position");
    e.token = r.i32("entry token");
    const int32_t sample = r.i32("entry flag");
    check_slot(e.seq);
    if (e.pos < 0 || e.pos >= n_ctx || e.token < 0 || e.token >= n_vocab || (sample != 0 && sample != 1))
      throw Error(fmt::format("{}: step entry {} (slot {}, position {}, token {}) is outside the context of {} or the "
                              "vocabulary of {}",
                              who, i, e.seq, e.pos, e.token, n_ctx, n_vocab));
    e.want_logits = sample == 1;
    sampling += sample;
    m.entries.entries.push_back(e);
  }
  if (!r.done()) throw Error(fmt::format("{}: step message of {} bytes has bytes after its entries", who, bytes.size()));
  if ((m.kind == StepKind::Mark || m.kind == StepKind::Shutdown) && n_entries > 0)
    throw Error(fmt::format("{}: a mark or shutdown carries no entries", who));
  if (m.kind == StepKind::Logits && sampling != 1)
    throw Error(fmt::format("{}: a logits step needs exactly one entry that wants logits, not {}", who, sampling));
  return m;
}

std::vector<uint8_t> encode_tokens(std::span<const SlotToken> tokens) {
  Writer w;
  for (const SlotToken& t : tokens) {
    w.i32(t.slot);
    w.i32(t.token);
    w.i32(t.logprobs ? int32_t(t.logprobs->top.size()) : -1);
    if (!t.logprobs) continue;
    w.f32(t.logprobs->logprob);
    for (const TokenLogprob& c : t.logprobs->top) {
      w.i32(c.id);
      w.f32(c.logprob);
    }
  }
  return std::move(w.out);
}

std::vector<SlotToken> decode_tokens(std::span<const uint8_t> bytes, int64_t n_slots, int64_t n_vocab,
                                     const std::string& who) {
  Reader r(bytes, who, "token message");
  std::vector<SlotToken> out;
  const auto check_logprob = [&](float lp) {
    if (!(lp <= 0)) throw Error(fmt::format("{}: token message carries the log-probability {}, not <= 0", who, lp));
    return lp;
  };
  while (!r.done()) {
    SlotToken t;
    t.slot = r.i32("slot");
    t.token = r.i32("token");
    const int32_t n_top = r.i32("top count");
    if (t.slot < 0 || t.slot >= n_slots || t.token < 0 || t.token >= n_vocab)
      throw Error(fmt::format("{}: token message names token {} for slot {}, outside the vocabulary of {} or the {} slots",
                              who, t.token, t.slot, n_vocab, n_slots));
    if (n_top < -1 || n_top > kMaxTopLogprobs)
      throw Error(fmt::format("{}: token message with {} top log-probabilities, outside [-1, {}]", who, n_top, kMaxTopLogprobs));
    if (n_top >= 0) {
      SampledLogprobs& lp = t.logprobs.emplace();
      lp.logprob = check_logprob(r.f32("log-probability"));
      for (int32_t i = 0; i < n_top; ++i) {
        const TokenId id = r.i32("top token");
        if (id < 0 || id >= n_vocab)
          throw Error(fmt::format("{}: token message names top token {} outside the vocabulary of {}", who, id, n_vocab));
        lp.top.push_back({id, check_logprob(r.f32("top log-probability"))});
      }
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<Batch> split_by_sequence(const Batch& entries, int parts) {
  // Slots in order of first appearance, each with its entries in order.
  std::vector<std::vector<BatchEntry>> groups;
  std::unordered_map<int32_t, size_t> group_of;
  for (const BatchEntry& e : entries.entries) {
    const auto [it, fresh] = group_of.emplace(e.seq, groups.size());
    if (fresh) groups.emplace_back();
    groups[it->second].push_back(e);
  }
  const size_t n_parts = std::min(groups.size(), size_t(std::max(parts, 1)));
  std::vector<Batch> out;
  if (n_parts == 0) return out;
  out.emplace_back();
  const double share = double(entries.size()) / double(n_parts);
  size_t taken = 0;
  for (const auto& g : groups) {
    // A new part when this slot's middle falls beyond the current part's share.
    if (!out.back().entries.empty() && double(taken) + 0.5 * double(g.size()) > share * double(out.size()) &&
        out.size() < n_parts)
      out.emplace_back();
    for (const BatchEntry& e : g) out.back().entries.push_back(e);
    taken += g.size();
  }
  return out;
}


void StepBuilder::check_slot(int32_t slot, const char* what) const {
  if (slot < 0 || size_t(slot) >= live_.size())
    throw Error(fmt::format("engine {}: slot {} is outside [0, {})", what, slot, live_.size()));
}

void StepBuilder::add(int32_t slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) {
  check_slot(slot, "add");
  if (live_[size_t(slot)]) throw Error(fmt::format("engine add: slot {} is already live", slot));
  if (int64_t(kept_prefix.size()) >= n_ctx_)
    throw Error(fmt::format("engine add: kept prefix of {} tokens fills the context of {}", kept_prefix.size(), n_ctx_));
  check_sampler_params(params, "engine add");
  SeqOp op{true, slot, params, {}};
  // Only the tail the penalties look at matters to the sampler.
  const size_t keep = std::min(kept_prefix.size(), size_t(params.penalty_window));
  op.recent.assign(kept_prefix.end() - std::ptrdiff_t(keep), kept_prefix.end());
  for (const TokenId t : op.recent)
    if (t < 0 || t >= n_vocab_) throw Error(fmt::format("engine add: token id {} is outside the vocabulary of {}", t, n_vocab_));
  pending_.push_back(std::move(op));
  live_[size_t(slot)] = true;
}

void StepBuilder::free(int32_t slot) {
  check_slot(slot, "free");
  if (!live_[size_t(slot)]) return;
  pending_.push_back({false, slot, {}, {}});
  live_[size_t(slot)] = false;
}

StepMessage StepBuilder::take(StepKind kind, const Batch& entries) {
  if (int64_t(entries.size()) > max_entries_)
    throw Error(fmt::format("engine step: {} entries, at most {} per step", entries.size(), max_entries_));
  std::vector<bool> sampled(live_.size(), false);
  for (const BatchEntry& e : entries.entries) {
    check_slot(e.seq, "step");
    if (!live_[size_t(e.seq)]) throw Error(fmt::format("engine step: slot {} is not live", e.seq));
    if (e.pos < 0 || e.pos >= n_ctx_ || e.token < 0 || e.token >= n_vocab_)
      throw Error(fmt::format("engine step: slot {}: position {} or token {} is outside the context of {} or the "
                              "vocabulary of {}",
                              e.seq, e.pos, e.token, n_ctx_, n_vocab_));
    if (!e.want_logits) continue;
    if (sampled[size_t(e.seq)]) throw Error(fmt::format("engine step: slot {} has two sampling entries", e.seq));
    sampled[size_t(e.seq)] = true;
  }
  StepMessage m;
  m.kind = kind;
  m.ops = std::move(pending_);
  pending_.clear();
  m.entries = entries;
  return m;
}

}  // namespace shardlm::parallel
