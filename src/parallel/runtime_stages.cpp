// The per-stage loops of DistributedSession (see runtime.h): the first stage
// schedules prefill chunks and decode micro-batches, later stages run what
// arrives, the last stage samples.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>

#include "core/error.h"
#include "parallel/runtime.h"
#include "parallel/runtime_request.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr uint32_t kTagStage = 1, kTagTokens = 2, kTagLogits = 3;
constexpr int32_t kRun = 0, kEnd = 1;

using Tokens = std::vector<std::pair<int32_t, TokenId>>;

}  // namespace

void DistributedSession::drive(const Request& r, const std::function<void(int, TokenId)>& on_token,
                               std::vector<float>* logits_out) {
  const int n = r.h.n_seqs;
  const bool generating = r.h.op == kGenerate;
  std::vector<Seq> seqs(static_cast<size_t>(n));
  std::deque<size_t> in_flight;  // sizes of the micro-batches whose tokens are still to come
  std::deque<Tokens> local;      // pp == 1: results are ready at once
  const size_t max_in_flight = size_t(plan_.pp);
  const size_t micro = size_t((n + std::min(n, plan_.pp) - 1) / std::min(n, plan_.pp));
  Batch b;
  auto submit = [&](size_t expected) {
    Tokens got = run_batch(r, b, nullptr, logits_out);
    if (plan_.pp == 1 && expected) local.push_back(std::move(got));
    if (expected) in_flight.push_back(expected);
  };
  for (;;) {
    // Prompts first, one chunk of n_batch tokens at a time.
    auto pre = std::find_if(seqs.begin(), seqs.end(), [&](const Seq& s) {
      return s.prefilled < size_t(r.lens[size_t(&s - seqs.data())]);
    });
    if (pre != seqs.end() && in_flight.size() < max_in_flight) {
      const int seq = int(pre - seqs.begin());
      const auto prompt = r.prompt(seq);
      const size_t end = std::min(prompt.size(), pre->prefilled + size_t(opt_.n_batch));
      b.clear();
      for (size_t i = pre->prefilled; i < end; ++i) b.add(seq, int32_t(i), prompt[i], i + 1 == prompt.size());
      pre->prefilled = end;
      pre->pos = int32_t(end);
      const bool last_chunk = end == prompt.size();
      if (last_chunk) pre->in_flight = generating;
      submit(last_chunk && generating ? 1 : 0);
      continue;
    }
    // Then decode: ready sequences in micro-batches, up to pp of them in flight.
    if (pre == seqs.end() && in_flight.size() < max_in_flight) {
      b.clear();
      for (int s = 0; s < n && b.size() < micro; ++s) {
        Seq& q = seqs[size_t(s)];
        if (q.done || q.in_flight || q.next < 0) continue;
        b.add(s, q.pos++, q.next, true);
        q.in_flight = true;
      }
      if (b.size() > 0) {
        submit(b.size());
        continue;
      }
    }
    if (in_flight.empty()) break;
    Tokens got;
    if (plan_.pp == 1) {
      got = std::move(local.front());
      local.pop_front();
    } else {
      got = recv_tokens();
    }
    if (got.size() != in_flight.front())
      throw Error(fmt::format("runtime: {} tokens came back for a micro-batch of {}", got.size(), in_flight.front()));
    in_flight.pop_front();
    for (const auto& [seq, token] : got) {
      if (seq < 0 || seq >= n) throw Error(fmt::format("runtime: token for unknown sequence {}", seq));
      Seq& q = seqs[size_t(seq)];
      q.in_flight = false;
      ++q.generated;
      ++stats_.tokens;
      if (on_token && rank_ == 0) on_token(seq, token);
      if (q.generated >= r.h.n_predict || token == r.h.eos)
        q.done = true;
      else
        q.next = token;
    }
  }
  if (plan_.pp > 1) {
    send_stage(kEnd, nullptr);
    if (!generating && rank_ == 0) {
      const auto t = Clock::now();
      logits_out->resize(size_t(model_->config().n_vocab));
      const size_t got = world_->recv(plan_.rank_of(plan_.pp - 1, 0), kTagLogits, logits_out->data(),
                                      logits_out->size() * sizeof(float));
      stats_.p2p_wait_seconds += since(t);
      if (got != logits_out->size() * sizeof(float)) throw Error("runtime: short logits message from the last stage");
    }
  }
}

void DistributedSession::follow(const Request& r, std::vector<float>* logits_out) {
  Batch b;
  const bool last = plan_.ranks[size_t(rank_)].last_stage(model_->config());
  while (recv_stage(b)) {
    Tokens got = run_batch(r, b, hidden_in_.data(), logits_out);
    if (last && !got.empty()) send_tokens(got);
  }
  if (!last) send_stage(kEnd, nullptr);
}

DistributedSession::Tokens DistributedSession::run_batch(const Request& r, const Batch& batch, const float* hidden,
                                                         std::vector<float>* logits_out) {
  const auto t = Clock::now();
  const double cpu = process_cpu_seconds();
  model_->forward(batch, hidden);
  stats_.forward_seconds += since(t);
  stats_.forward_cpu_seconds += process_cpu_seconds() - cpu;
  ++stats_.forward_calls;
  if (!plan_.ranks[size_t(rank_)].last_stage(model_->config())) {
    send_stage(kRun, &batch);
    return {};
  }
  const bool outputs = std::any_of(batch.entries.begin(), batch.entries.end(), [](auto& e) { return e.want_logits; });
  if (!outputs) return {};
  if (r.h.op != kGenerate) {
    gather_logits(logits_out);
    return {};
  }
  return sample(batch);
}

DistributedSession::Tokens DistributedSession::sample(const Batch& batch) {
  const size_t per = samplers_.at(0)->per_rank();
  std::vector<int32_t> out_seqs;
  for (const auto& e : batch.entries)
    if (e.want_logits) out_seqs.push_back(e.seq);
  const size_t n_out = out_seqs.size();
  cand_mine_.resize(n_out * per);
  for (size_t k = 0; k < n_out; ++k)
    samplers_.at(size_t(out_seqs[k]))->local_candidates(model_->logits(k), &cand_mine_[k * per]);
  const int tp = plan_.tp;
  cand_all_.resize(n_out * per * size_t(tp));
  if (tp > 1) {
    const auto t = Clock::now();
    stage_->all_gather(cand_mine_.data(), cand_all_.data(), cand_mine_.size() * sizeof(Candidate));
    stats_.collective_seconds += since(t);
    stats_.bytes_sent += double(tp - 1) * double(cand_mine_.size() * sizeof(Candidate));
  } else {
    cand_all_ = cand_mine_;
  }
  Tokens tokens;
  std::vector<Candidate> merged(per * size_t(tp));
  for (size_t k = 0; k < n_out; ++k) {
    for (int i = 0; i < tp; ++i)
      std::copy_n(&cand_all_[(size_t(i) * n_out + k) * per], per, &merged[size_t(i) * per]);
    auto& sampler = *samplers_.at(size_t(out_seqs[k]));
    const TokenId id = sampler.choose(merged);
    sampler.accept(id);
    tokens.push_back({out_seqs[k], id});
  }
  return tokens;
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

void DistributedSession::send_stage(int kind, const Batch* batch) {
  const auto& c = model_->config();
  const size_t n = batch ? batch->size() : 0;
  const size_t row = wire_row_bytes(plan_.wire_type, size_t(c.n_embd));
  send_buf_.resize(8 + n * 12 + n * row);
  int32_t* h = reinterpret_cast<int32_t*>(send_buf_.data());
  h[0] = kind;
  h[1] = int32_t(n);
  for (size_t i = 0; i < n; ++i) {
    const auto& e = batch->entries[i];
    h[2 + 3 * i] = e.seq;
    h[3 + 3 * i] = e.pos;
    h[4 + 3 * i] = e.want_logits;
  }
  if (batch) wire_encode(plan_.wire_type, model_->hidden().data(), n, size_t(c.n_embd), send_buf_.data() + 8 + n * 12);
  world_->send(plan_.rank_of(stage_index_ + 1, tp_index_), kTagStage, send_buf_.data(), send_buf_.size());
  stats_.bytes_sent += double(send_buf_.size());
}

bool DistributedSession::recv_stage(Batch& batch) {
  const auto& c = model_->config();
  const int peer = plan_.rank_of(stage_index_ - 1, tp_index_);
  const auto t = Clock::now();
  const size_t got = world_->recv(peer, kTagStage, recv_buf_.data(), recv_buf_.size());
  stats_.p2p_wait_seconds += since(t);
  const int32_t* h = reinterpret_cast<const int32_t*>(recv_buf_.data());
  if (got < 8) throw Error(fmt::format("runtime: short stage message ({} bytes) from rank {}", got, peer));
  if (h[0] == kEnd) return false;
  const int64_t n = h[1];
  const size_t row = wire_row_bytes(plan_.wire_type, size_t(c.n_embd));
  if (h[0] != kRun || n < 1 || n > opt_.n_batch || got != size_t(8 + n * 12) + size_t(n) * row)
    throw Error(fmt::format("runtime: malformed stage message ({} bytes, {} entries) from rank {}", got, n, peer));
  batch.clear();
  for (int64_t i = 0; i < n; ++i) batch.add(h[2 + 3 * i], h[3 + 3 * i], 0, h[4 + 3 * i] != 0);
  wire_decode(plan_.wire_type, recv_buf_.data() + 8 + n * 12, size_t(n), size_t(c.n_embd), hidden_in_.data());
  return true;
}

void DistributedSession::send_tokens(const Tokens& tokens) {
  std::vector<int32_t> msg{int32_t(tokens.size())};
  for (const auto& [seq, id] : tokens) msg.insert(msg.end(), {seq, id});
  world_->send(plan_.rank_of(0, tp_index_), kTagTokens, msg.data(), msg.size() * sizeof(int32_t));
  stats_.bytes_sent += double(msg.size() * sizeof(int32_t));
}

DistributedSession::Tokens DistributedSession::recv_tokens() {
  const int peer = plan_.rank_of(plan_.pp - 1, tp_index_);
  std::vector<int32_t> msg(1 + 2 * size_t(opt_.n_seq));
  const auto t = Clock::now();
  const size_t got = world_->recv(peer, kTagTokens, msg.data(), msg.size() * sizeof(int32_t));
  stats_.p2p_wait_seconds += since(t);
  if (got < 4 || got != (1 + 2 * size_t(msg[0])) * sizeof(int32_t))
    throw Error(fmt::format("runtime: malformed token message ({} bytes) from rank {}", got, peer));
  Tokens tokens;
  for (int32_t i = 0; i < msg[0]; ++i) tokens.push_back({msg[1 + 2 * size_t(i)], msg[2 + 2 * size_t(i)]});
  return tokens;
}

}  // namespace shardlm::parallel
