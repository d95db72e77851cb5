#include "parallel/runtime.h"
#include "parallel/runtime_request.h"

#include <fmt/format.h>

#include <chrono>
#include <ctime>
#include <cmath>

#include "core/error.h"
#include "core/thread_pool.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Bytes this rank puts on the wire for one all-reduce of `bytes` (the algorithms of comm/algorithms.h).
double all_reduce_wire_bytes(comm::AllReduceAlgo algo, int n, double bytes) {
  switch (algo) {
    case comm::AllReduceAlgo::OneShot: return double(n - 1) * bytes;
    case comm::AllReduceAlgo::RecursiveDoubling: return std::ceil(std::log2(double(n))) * bytes;
    default: return 2 * double(n - 1) / double(n) * bytes;
  }
}

}  // namespace

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

DistributedSession::DistributedSession(std::shared_ptr<comm::Communicator> world, const Plan& plan,
                                       const gguf::File& file, RuntimeOptions options)
    : world_(std::move(world)), plan_(plan), opt_(options), rank_(world_->rank()), wire_all_reduce_(plan.wire_type) {
  if (!is_wire_type(plan_.wire_type))
    throw Error(fmt::format("runtime: the plan's wire type {} is not f32, f16, bf16 or q8_0", dtype_name(plan_.wire_type)));
  if (world_->size() != plan_.size())
    throw Error(fmt::format("runtime: the plan has {} ranks but the world has {}", plan_.size(), world_->size()));
  stage_index_ = plan_.stage_of(rank_);
  tp_index_ = plan_.tp_index(rank_);
  stage_ = world_->split(stage_index_, tp_index_);
  if (opt_.threads > 1) pool_ = std::make_unique<ThreadPool>(opt_.threads);
  ModelOptions mo;
  mo.n_ctx = opt_.n_ctx;
  mo.n_seq = opt_.n_seq;
  mo.n_batch = opt_.n_batch;
  mo.n_outputs = opt_.n_seq;
  mo.kv_type = opt_.kv_type;
  mo.pool = pool_.get();
  mo.plan = plan_.ranks[size_t(rank_)];
  if (plan_.tp > 1) mo.hooks.all_reduce = [this](float* data, size_t count) { all_reduce_hook(data, count); };
  model_ = std::make_unique<Model>(file, mo);
  const auto& c = model_->config();
  hidden_in_.resize(size_t(opt_.n_batch * c.n_embd));
  recv_buf_.resize(8 + size_t(opt_.n_batch) * (12 + wire_row_bytes(plan_.wire_type, size_t(c.n_embd))));
}

DistributedSession::~DistributedSession() = default;

void DistributedSession::all_reduce_hook(float* data, size_t count) {
  const auto t = Clock::now();
  const double cpu = process_cpu_seconds();
  double sent = 0;
  if (plan_.wire_type == DType::F32) {
    stage_->all_reduce(data, count, DType::F32);
    const double bytes = double(count) * 4;
    sent = all_reduce_wire_bytes(stage_->choose_all_reduce(size_t(bytes)), stage_->size(), bytes);
  } else {
    const size_t n_embd = size_t(model_->config().n_embd);
    sent = wire_all_reduce_.run(*stage_, data, count / n_embd, n_embd);
  }
  const double waited = since(t);
  stats_.collective_seconds += waited;
  stats_.all_reduce_seconds += waited;
  stats_.all_reduce_cpu_seconds += process_cpu_seconds() - cpu;
  ++stats_.all_reduces;
  stats_.bytes_sent += sent;
}

void DistributedSession::broadcast_request(Request& r) {
  world_->broadcast(&r.h, sizeof r.h, 0);
  if (r.h.op == kShutdown) return;
  if (r.h.n_seqs < 1 || r.h.n_seqs > opt_.n_seq || r.h.n_tokens < 1 ||
      r.h.n_tokens > opt_.n_seq * opt_.n_ctx)
    throw Error(fmt::format("runtime: request from rank 0 with {} sequences / {} tokens does not fit", r.h.n_seqs,
                            r.h.n_tokens));
  r.lens.resize(size_t(r.h.n_seqs));
  r.tokens.resize(size_t(r.h.n_tokens));
  world_->broadcast(r.lens.data(), r.lens.size() * sizeof(int32_t), 0);
  world_->broadcast(r.tokens.data(), r.tokens.size() * sizeof(TokenId), 0);
}

void DistributedSession::generate(const GenerateRequest& q, const std::function<void(int, TokenId)>& on_token) {
  if (rank_ != 0) throw Error("runtime: generate() is for rank 0; other ranks call serve()");
  const auto& c = model_->config();
  if (q.prompts.empty() || int64_t(q.prompts.size()) > opt_.n_seq)
    throw Error(fmt::format("generate: {} prompts, the session holds 1 to {} sequences", q.prompts.size(),
                            opt_.n_seq));
  if (q.n_predict < 1) throw Error("generate: the number of tokens to generate must be at least 1");
  Request r;
  r.h.op = kGenerate;
  r.h.n_seqs = int32_t(q.prompts.size());
  r.h.n_predict = q.n_predict;
  r.h.eos = q.eos;
  const auto& s = q.sampling;
  r.h.sampling = s;
  if (s.repeat_penalty <= 0) throw Error(fmt::format("generate: repeat penalty {} must be positive", s.repeat_penalty));
  for (size_t i = 0; i < q.prompts.size(); ++i) {
    const auto& p = q.prompts[i];
    if (p.empty()) throw Error(fmt::format("generate: prompt {} is empty", i));
    if (int64_t(p.size()) + q.n_predict > opt_.n_ctx)
      throw Error(fmt::format("generate: prompt {} ({} tokens) + {} tokens exceeds the context of {}", i, p.size(),
                              q.n_predict, opt_.n_ctx));
    for (TokenId t : p)
      if (t < 0 || t >= c.n_vocab)
        throw Error(fmt::format("generate: prompt {}: token id {} is outside the vocabulary of {}", i, t, c.n_vocab));
    r.lens.push_back(int32_t(p.size()));
    r.tokens.insert(r.tokens.end(), p.begin(), p.end());
  }
  r.h.n_tokens = int64_t(r.tokens.size());
  broadcast_request(r);
  run(r, on_token, nullptr);
}

std::vector<float> DistributedSession::prompt_logits(const std::vector<TokenId>& prompt) {
  if (rank_ != 0) throw Error("runtime: prompt_logits() is for rank 0");
  if (prompt.empty() || int64_t(prompt.size()) > opt_.n_ctx)
    throw Error(fmt::format("prompt_logits: {} tokens for a context of {}", prompt.size(), opt_.n_ctx));
  for (TokenId t : prompt)
    if (t < 0 || t >= model_->config().n_vocab) throw Error(fmt::format("prompt_logits: token id {} out of range", t));
  Request r;
  r.h.op = kLogits;
  r.h.n_seqs = 1;
  r.h.n_predict = 0;
  r.lens = {int32_t(prompt.size())};
  r.tokens = prompt;
  r.h.n_tokens = int64_t(prompt.size());
  broadcast_request(r);
  std::vector<float> logits;
  run(r, nullptr, &logits);
  return logits;
}

void DistributedSession::shutdown() {
  if (rank_ != 0) throw Error("runtime: shutdown() is for rank 0");
  Request r;
  r.h.op = kShutdown;
  broadcast_request(r);
}

void DistributedSession::serve() {
  if (rank_ == 0) throw Error("runtime: rank 0 drives; serve() is for the other ranks");
  for (;;) {
    Request r;
    broadcast_request(r);
    if (r.h.op == kShutdown) return;
    run(r, nullptr, nullptr);
  }
}

void DistributedSession::run(const Request& r, const std::function<void(int, TokenId)>& on_token,
                             std::vector<float>* logits_out) {
  const auto t = Clock::now();
  samplers_.clear();
  if (plan_.ranks[size_t(rank_)].last_stage(model_->config()) && r.h.op == kGenerate) {
    std::vector<Range> slices;
    for (int i = 0; i < plan_.tp; ++i) slices.push_back(plan_.ranks[size_t(plan_.rank_of(stage_index_, i))].vocab_rows);
    for (int s = 0; s < r.h.n_seqs; ++s) {
      samplers_.push_back(std::make_unique<ShardedSampler>(r.sampling(s), slices, tp_index_));
      for (TokenId id : r.prompt(s)) samplers_.back()->accept(id);
    }
  }
  if (stage_index_ == 0)
    drive(r, on_token, logits_out);
  else
    follow(r, logits_out);
  stats_.total_seconds += since(t);
}

}  // namespace shardlm::parallel
