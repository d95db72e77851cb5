// What every rank does with one step (see distributed_session.h): the first stage runs
// the micro-batches and collects the sampled tokens, later stages run what
// arrives and pass it on, the last stage samples.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "parallel/distributed_session.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {


constexpr uint32_t kTagStage = 1, kTagTokens = 2, kTagLogits = 3;

size_t sampling_entries(const Batch& b) {
  return size_t(std::count_if(b.entries.begin(), b.entries.end(), [](const BatchEntry& e) { return e.want_logits; }));
}

}  // namespace

void DistributedSession::apply(const SeqOp& op) {
  const size_t slot = size_t(op.slot);
  if (op.add == live_[slot])
    throw Error(fmt::format("distributed session: slot {} {} twice", op.slot, op.add ? "added" : "freed"));
  live_[slot] = op.add;
  if (!last_stage_) return;
  if (!op.add) {
    samplers_[slot].reset();
    return;
  }
  std::vector<Range> slices;
  for (int i = 0; i < plan_.tp; ++i) slices.push_back(plan_.ranks[size_t(plan_.rank_of(stage_index_, i))].vocab_rows);
  samplers_[slot] = std::make_unique<ShardedSampler>(op.params, std::move(slices), tp_index_);
  for (const TokenId t : op.recent) samplers_[slot]->accept(t);
}

std::vector<SlotToken> DistributedSession::execute(const StepMessage& m, std::vector<float>* logits_out) {
  const auto t = SteadyClock::now();
  for (const SeqOp& op : m.ops) apply(op);
  if (m.entries.size() == 0) return {};
  for (const BatchEntry& e : m.entries.entries)
    if (!live_[size_t(e.seq)]) throw Error(fmt::format("distributed session: step entry for slot {}, which is not live", e.seq));
  const std::vector<Batch> micro = split_by_sequence(m.entries, m.kind == StepKind::Logits ? 1 : plan_.pp);
  std::vector<SlotToken> got;
  if (stage_index_ == 0) {
    for (const Batch& b : micro) {
      auto mine = run_batch(m.kind, b, nullptr, logits_out);
      got.insert(got.end(), mine.begin(), mine.end());
    }
    if (plan_.pp > 1 && m.kind == StepKind::Step)
      for (const Batch& b : micro) {
        const size_t n = sampling_entries(b);
        if (n == 0) continue;
        auto back = recv_tokens(n);
        got.insert(got.end(), back.begin(), back.end());
      }
    if (plan_.pp > 1 && m.kind == StepKind::Logits && rank_ == 0) {
      const auto tw = SteadyClock::now();
      logits_out->resize(size_t(model_->config().n_vocab));
      const size_t n = world_->recv(plan_.rank_of(plan_.pp - 1, 0), kTagLogits, logits_out->data(),
                                    logits_out->size() * sizeof(float));
      stats_.p2p_wait_seconds += seconds_since(tw);
      if (n != logits_out->size() * sizeof(float)) throw Error("distributed session: short logits message from the last stage");
    }
  } else {
    for (const Batch& b : micro) {
      recv_stage(b);
      auto mine = run_batch(m.kind, b, hidden_in_.data(), logits_out);
      if (last_stage_ && !mine.empty()) send_tokens(mine);
    }
  }
  stats_.tokens += int64_t(got.size());
  stats_.total_seconds += seconds_since(t);
  if (rank_ != 0 || m.kind != StepKind::Step) return got;
  // Entry order, whatever order the micro-batches came back in.
  std::unordered_map<int32_t, SlotToken*> by_slot;
  for (SlotToken& s : got) by_slot[s.slot] = &s;
  std::vector<SlotToken> out;
  for (const BatchEntry& e : m.entries.entries) {
    if (!e.want_logits) continue;
    const auto it = by_slot.find(e.seq);
    if (it == by_slot.end()) throw Error(fmt::format("distributed session: no token came back for slot {}", e.seq));
    out.push_back(std::move(*it->second));
  }
  return out;
}

void DistributedSession::note_expert_balance() {
  const auto load = model_->expert_load();
  const int64_t n_expert = model_->config().moe.n_expert;
  if (load.empty() || plan_.tp <= 1) return;
  for (size_t l = 0; l < load.size() / size_t(n_expert); ++l) {
    int64_t busiest = 0, total = 0;
    for (int t = 0; t < plan_.tp; ++t) {
      const Range e = plan_.ranks[size_t(plan_.rank_of(stage_index_, t))].experts;
      int64_t pairs = 0;
      for (int64_t i = e.begin; i < e.end; ++i) pairs += load[l * size_t(n_expert) + size_t(i)];
      busiest = std::max(busiest, pairs);
      total += pairs;
    }
    stats_.expert_pairs_busiest += double(busiest);
    stats_.expert_pairs_mean += double(total) / plan_.tp;
  }
}

std::vector<SlotToken> DistributedSession::run_batch(StepKind kind, const Batch& batch, const float* hidden,
                                                     std::vector<float>* logits_out) {
  const auto t = SteadyClock::now();
  const double cpu = process_cpu_seconds();
  const ContextSwitches switches = context_switches();
  const double ffn_waits = balance_[0].wait_seconds, output_waits = balance_[1].wait_seconds;
  all_reduces_in_forward_ = 0;
  ffn_segment_seconds_ = 0;
  segment_begin_ = t;
  model_->forward(batch, hidden);
  const auto end = SteadyClock::now();
  stats_.forward_seconds += std::chrono::duration<double>(end - t).count();
  // The output's segment: from the last all-reduce to the logits.
  note_balance_window(int64_t(batch.size()), ffn_segment_seconds_ - (balance_[0].wait_seconds - ffn_waits),
                      std::chrono::duration<double>(end - segment_begin_).count() -
                          (balance_[1].wait_seconds - output_waits));
  stats_.forward_cpu_seconds += process_cpu_seconds() - cpu;
  const ContextSwitches after = context_switches();
  stats_.voluntary_switches += after.voluntary - switches.voluntary;
  stats_.involuntary_switches += after.involuntary - switches.involuntary;
  ++stats_.forward_calls;
  note_expert_balance();
  if (!last_stage_) {
    send_stage(batch);
    return {};
  }
  if (sampling_entries(batch) == 0) return {};
  if (kind == StepKind::Logits) {
    gather_logits(logits_out);
    return {};
  }
  return sample(batch);
}

std::vector<SlotToken> DistributedSession::sample(const Batch& batch) {
  // The penalties see every fed token, as the single-node engine's sampler does.
  for (const auto& e : batch.entries) samplers_[size_t(e.seq)]->accept(e.token);
  std::vector<int32_t> out_slots;
  for (const auto& e : batch.entries)
    if (e.want_logits) out_slots.push_back(e.seq);
  const size_t n_out = out_slots.size();
  // Ranks may pad to different widths per slot: every slot's block is the widest.
  size_t per = 0;
  for (const int32_t s : out_slots) per = std::max(per, samplers_[size_t(s)]->per_rank());
  cand_mine_.assign(n_out * per, Candidate{});
  for (size_t k = 0; k < n_out; ++k)
    samplers_[size_t(out_slots[k])]->local_candidates(model_->logits(k), &cand_mine_[k * per]);
  const int tp = plan_.tp;
  cand_all_.resize(n_out * per * size_t(tp));
  if (tp > 1) {
    const auto t = SteadyClock::now();
    stage_->all_gather(cand_mine_.data(), cand_all_.data(), cand_mine_.size() * sizeof(Candidate));
    stats_.collective_seconds += seconds_since(t);
    stats_.bytes_sent += double(tp - 1) * double(cand_mine_.size() * sizeof(Candidate));
  } else {
    cand_all_ = cand_mine_;
  }
  std::vector<SlotToken> tokens;
  std::vector<Candidate> merged;
  for (size_t k = 0; k < n_out; ++k) {
    auto& sampler = *samplers_[size_t(out_slots[k])];
    const size_t mine = sampler.per_rank();
    merged.assign(mine * size_t(tp), Candidate{});
    for (int i = 0; i < tp; ++i)
      std::copy_n(&cand_all_[(size_t(i) * n_out + k) * per], mine, &merged[size_t(i) * mine]);
    tokens.push_back({out_slots[k], sampler.choose(merged), std::nullopt});
  }
  add_logprobs(tokens);
  return tokens;
}

// The second exchange, for the slots that asked for log-probabilities (sharded_sampler.h).
void DistributedSession::add_logprobs(std::vector<SlotToken>& tokens) {
  std::vector<size_t> asking;
  for (size_t k = 0; k < tokens.size(); ++k)
    if (samplers_[size_t(tokens[k].slot)]->wants_logprobs()) asking.push_back(k);
  if (asking.empty()) return;
  const size_t tp = size_t(plan_.tp);
  lp_mine_.resize(asking.size());
  for (size_t j = 0; j < asking.size(); ++j) {
    const SlotToken& t = tokens[asking[j]];
    lp_mine_[j] = samplers_[size_t(t.slot)]->local_logprobs(model_->logits(asking[j]), t.token);
  }
  lp_all_.resize(asking.size() * tp);
  if (tp > 1) {
    const auto t = SteadyClock::now();
    stage_->all_gather(lp_mine_.data(), lp_all_.data(), lp_mine_.size() * sizeof(LogprobPart));
    stats_.collective_seconds += seconds_since(t);
    stats_.bytes_sent += double(tp - 1) * double(lp_mine_.size() * sizeof(LogprobPart));
  } else {
    lp_all_ = lp_mine_;
  }
  std::vector<LogprobPart> parts(tp);
  for (size_t j = 0; j < asking.size(); ++j) {
    SlotToken& t = tokens[asking[j]];
    for (size_t i = 0; i < tp; ++i) parts[i] = lp_all_[i * asking.size() + j];
    t.logprobs = samplers_[size_t(t.slot)]->merge_logprobs(parts, t.token);
  }
}

void DistributedSession::gather_logits(std::vector<float>* logits_out) {
  const auto& c = model_->config();
  const auto mine = model_->logits(0);
  std::vector<float> full(size_t(c.n_vocab));
  if (plan_.tp == 1) {
    std::copy(mine.begin(), mine.end(), full.begin());
  } else {
    int64_t widest = 0;
    for (int i = 0; i < plan_.tp; ++i)
      widest = std::max(widest, plan_.ranks[size_t(plan_.rank_of(stage_index_, i))].vocab_rows.size());
    std::vector<float> padded(static_cast<size_t>(widest)), all(static_cast<size_t>(widest * plan_.tp));
    std::copy(mine.begin(), mine.end(), padded.begin());
    stage_->all_gather(padded.data(), all.data(), padded.size() * sizeof(float));
    for (int i = 0; i < plan_.tp; ++i) {
      const Range v = plan_.ranks[size_t(plan_.rank_of(stage_index_, i))].vocab_rows;
      std::copy_n(&all[size_t(i * widest)], size_t(v.size()), &full[size_t(v.begin)]);
    }
  }
  if (tp_index_ != 0) return;
  if (rank_ == 0)
    *logits_out = std::move(full);
  else
    world_->send(0, kTagLogits, full.data(), full.size() * sizeof(float));
}

// A stage message: i64 entry count, then the hidden rows on the wire type.
// The entries themselves every rank knows from the step's broadcast.
void DistributedSession::send_stage(const Batch& batch) {
  const auto& c = model_->config();
  const size_t n = batch.size();
  const size_t row = wire_row_bytes(plan_.wire_type, size_t(c.n_embd));
  send_buf_.resize(8 + n * row);
  const int64_t count = int64_t(n);
  std::memcpy(send_buf_.data(), &count, sizeof count);
  wire_encode(plan_.wire_type, model_->hidden().data(), n, size_t(c.n_embd), send_buf_.data() + 8);
  world_->send(plan_.rank_of(stage_index_ + 1, tp_index_), kTagStage, send_buf_.data(), send_buf_.size());
  stats_.bytes_sent += double(send_buf_.size());
}

void DistributedSession::recv_stage(const Batch& expected) {
  const auto& c = model_->config();
  const int peer = plan_.rank_of(stage_index_ - 1, tp_index_);
  const auto t = SteadyClock::now();
  const size_t got = world_->recv(peer, kTagStage, recv_buf_.data(), recv_buf_.size());
  stats_.p2p_wait_seconds += seconds_since(t);
  int64_t n = -1;
  if (got >= 8) std::memcpy(&n, recv_buf_.data(), sizeof n);
  const size_t row = wire_row_bytes(plan_.wire_type, size_t(c.n_embd));
  if (n != int64_t(expected.size()) || got != 8 + size_t(n) * row)
    throw Error(fmt::format("distributed session: stage message of {} bytes from rank {} for a micro-batch of {} entries", got, peer,
                            expected.size()));
  wire_decode(plan_.wire_type, recv_buf_.data() + 8, size_t(n), size_t(c.n_embd), hidden_in_.data());
}

void DistributedSession::send_tokens(const std::vector<SlotToken>& tokens) {
  const std::vector<uint8_t> bytes = encode_tokens(tokens);
  world_->send(plan_.rank_of(0, tp_index_), kTagTokens, bytes.data(), bytes.size());
  stats_.bytes_sent += double(bytes.size());
}

std::vector<SlotToken> DistributedSession::recv_tokens(size_t expected) {
  const int peer = plan_.rank_of(plan_.pp - 1, tp_index_);
  std::vector<uint8_t> bytes(expected * kMaxEncodedTokenBytes);
  const auto t = SteadyClock::now();
  const size_t got = world_->recv(peer, kTagTokens, bytes.data(), bytes.size());
  stats_.p2p_wait_seconds += seconds_since(t);
  bytes.resize(got);
  auto tokens = decode_tokens(bytes, opt_.n_seq, model_->config().n_vocab, fmt::format("distributed session: rank {}", peer));
  if (tokens.size() != expected)
    throw Error(fmt::format("distributed session: token message of {} tokens from rank {}, expected {}", tokens.size(), peer, expected));
  return tokens;
}

}  // namespace shardlm::parallel
