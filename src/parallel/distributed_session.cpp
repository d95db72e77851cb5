#include "parallel/distributed_session.h"

#include <fmt/format.h>

#include <sys/resource.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <ctime>
#include <cmath>

#include "core/clock.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "parallel/wire_format.h"

namespace shardlm::parallel {
namespace {


// Bytes this rank puts on the wire for one all-reduce of `bytes` (the algorithms of comm/algorithms.h).
double all_reduce_wire_bytes(comm::AllReduceAlgo algo, int n, double bytes) {
  switch (algo) {
    case comm::AllReduceAlgo::OneShot: return double(n - 1) * bytes;
    case comm::AllReduceAlgo::RecursiveDoubling: return std::ceil(std::log2(double(n))) * bytes;
    case comm::AllReduceAlgo::HalvingDoubling: {  // plus the folded ranks' result, where n is no power of two
      const double p = double(std::bit_floor(unsigned(n)));
      return 2 * (p - 1) / p * bytes + (p < n ? bytes : 0);
    }
    default: return 2 * double(n - 1) / double(n) * bytes;
  }
}

}  // namespace

ContextSwitches context_switches() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return {int64_t(u.ru_nvcsw), int64_t(u.ru_nivcsw)};
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

DistributedSession::DistributedSession(std::shared_ptr<comm::Communicator> world, const Plan& plan,
                                       const gguf::File& file, DistributedSessionOptions options)
    : world_(std::move(world)), plan_(plan), opt_(options), rank_(world_->rank()), wire_all_reduce_(plan.wire_type) {
  if (!is_wire_type(plan_.wire_type))
    throw Error(fmt::format("distributed session: the plan's wire type {} is not f32, f16, bf16 or q8_0", dtype_name(plan_.wire_type)));
  if (world_->size() != plan_.size())
    throw Error(fmt::format("distributed session: the plan has {} ranks but the world has {}", plan_.size(), world_->size()));
  stage_index_ = plan_.stage_of(rank_);
  tp_index_ = plan_.tp_index(rank_);
  if (opt_.n_seq < 1 || opt_.n_batch < 1 || opt_.n_ctx < 1)
    throw Error(fmt::format("distributed session: {} slots, {} entries per step, {} positions: each must be at least 1", opt_.n_seq,
                            opt_.n_batch, opt_.n_ctx));
  stage_ = world_->split(stage_index_, tp_index_);
  if (opt_.threads > 1) pool_ = std::make_unique<ThreadPool>(opt_.threads);
  ModelOptions mo;
  mo.n_ctx = opt_.n_ctx;
  mo.n_seq = opt_.n_seq;
  mo.batch_invariant = opt_.batch_invariant;
  mo.n_batch = opt_.n_batch;
  mo.n_outputs = opt_.n_seq;
  mo.kv_type = opt_.kv_type;
  mo.commit_kv_cache = opt_.commit_kv_cache;
  mo.time_kernels_at_load = opt_.time_kernels_at_load;
  mo.pool = pool_.get();
  mo.plan = plan_.ranks[size_t(rank_)];
  if (plan_.tp > 1) mo.hooks.all_reduce = [this](float* data, size_t count) { all_reduce_hook(data, count); };
  install_row_hooks(mo, ModelConfig::from_gguf(file));
  model_ = std::make_unique<Model>(file, mo);
  const auto& c = model_->config();
  hidden_in_.resize(size_t(opt_.n_batch * c.n_embd));
  recv_buf_.resize(8 + size_t(opt_.n_batch) * wire_row_bytes(plan_.wire_type, size_t(c.n_embd)));
  last_stage_ = plan_.ranks[size_t(rank_)].last_stage(c);
  live_.assign(size_t(opt_.n_seq), false);
  samplers_.resize(size_t(opt_.n_seq));
  if (rank_ == 0) builder_ = std::make_unique<StepBuilder>(opt_.n_seq, opt_.n_batch, opt_.n_ctx, c.n_vocab);
}

DistributedSession::~DistributedSession() = default;

void DistributedSession::all_reduce_hook(float* data, size_t count) {
  // No CPU clock here: reading one is a system call (1.5 us on a paravirtual
  // guest), and two of them cost as much as a whole shm all-reduce.
  const auto t = SteadyClock::now();
  // Every second all-reduce of a forward ends an FFN (the first, attention).
  const bool ends_ffn = all_reduces_in_forward_++ % 2 == 1;
  if (ends_ffn) ffn_segment_seconds_ += std::chrono::duration<double>(t - segment_begin_).count();
  double sent = 0;
  if (plan_.wire_type == DType::F32) {
    stage_->all_reduce(data, count, DType::F32);
    const double bytes = double(count) * 4;
    sent = all_reduce_wire_bytes(stage_->choose_all_reduce(size_t(bytes)), stage_->size(), bytes);
  } else {
    const size_t n_embd = size_t(model_->config().n_embd);
    sent = wire_all_reduce_.run(*stage_, data, count / n_embd, n_embd);
  }
  segment_begin_ = SteadyClock::now();
  const double waited = std::chrono::duration<double>(segment_begin_ - t).count();
  stats_.collective_seconds += waited;
  stats_.all_reduce_seconds += waited;
  if (!ends_ffn) stats_.attention_all_reduce_seconds += waited;
  ++stats_.all_reduces;
  const auto bucket = size_t(std::upper_bound(std::begin(kWaitBucketEndsUs), std::end(kWaitBucketEndsUs), waited * 1e6) -
                             std::begin(kWaitBucketEndsUs));
  ++stats_.all_reduce_waits[bucket];
  stats_.all_reduce_wait_seconds[bucket] += waited;
  stats_.bytes_sent += sent;
}

void DistributedSession::broadcast(const StepMessage* message, StepMessage& received) {
  int64_t bytes = 0;
  if (message) {
    message_buf_ = message->encode();
    bytes = int64_t(message_buf_.size());
  }
  world_->broadcast(&bytes, sizeof bytes, 0);
  const int64_t limit = 64 + int64_t(opt_.n_batch) * 16 + (4 * opt_.n_seq + 16) * (64 + 4 * opt_.n_ctx);
  if (bytes < 12 || bytes > limit)
    throw Error(fmt::format("distributed session: step message of {} bytes from rank 0 (at most {})", bytes, limit));
  message_buf_.resize(size_t(bytes));
  world_->broadcast(message_buf_.data(), message_buf_.size(), 0);
  if (!message)
    received = StepMessage::decode(message_buf_, opt_.n_seq, opt_.n_batch, opt_.n_ctx, model_->config().n_vocab,
                                   "distributed session: rank 0");
}

void DistributedSession::add(int32_t slot, const SamplerParams& params, std::span<const TokenId> kept_prefix) {
  if (rank_ != 0) throw Error("distributed session: add() is for rank 0; other ranks call serve()");
  builder_->add(slot, params, kept_prefix);
}

void DistributedSession::free(int32_t slot) {
  if (rank_ != 0) throw Error("distributed session: free() is for rank 0; other ranks call serve()");
  builder_->free(slot);
}

std::vector<SlotToken> DistributedSession::step(const Batch& entries) {
  if (rank_ != 0) throw Error("distributed session: step() is for rank 0; other ranks call serve()");
  return run(builder_->take(StepKind::Step, entries));
}

std::vector<SlotToken> DistributedSession::run(const StepMessage& m) {
  if (rank_ != 0) throw Error("distributed session: run() is for rank 0; other ranks call serve()");
  StepMessage unused;
  broadcast(&m, unused);
  return execute(m, nullptr);
}

std::vector<float> DistributedSession::prompt_logits(const std::vector<TokenId>& prompt) {
  if (rank_ != 0) throw Error("distributed session: prompt_logits() is for rank 0");
  if (prompt.empty() || int64_t(prompt.size()) > opt_.n_ctx)
    throw Error(fmt::format("prompt_logits: {} tokens for a context of {}", prompt.size(), opt_.n_ctx));
  if (builder_->live(0)) throw Error("prompt_logits: slot 0 is live");
  SamplerParams greedy;
  greedy.temperature = 0;
  builder_->add(0, greedy, {});
  std::vector<float> logits;
  Batch b;
  for (size_t at = 0; at < prompt.size(); at += size_t(opt_.n_batch)) {
    const size_t end = std::min(prompt.size(), at + size_t(opt_.n_batch));
    b.clear();
    for (size_t i = at; i < end; ++i) b.add(0, int32_t(i), prompt[i], i + 1 == prompt.size());
    const StepMessage m = builder_->take(end == prompt.size() ? StepKind::Logits : StepKind::Step, b);
    StepMessage unused;
    broadcast(&m, unused);
    execute(m, &logits);
  }
  builder_->free(0);
  return logits;
}

void DistributedSession::mark() {
  if (rank_ != 0) throw Error("distributed session: mark() is for rank 0");
  run(builder_->take(StepKind::Mark, {}));
}

void DistributedSession::shutdown() {
  if (rank_ != 0) throw Error("distributed session: shutdown() is for rank 0");
  run(builder_->take(StepKind::Shutdown, {}));
}

bool DistributedSession::serve() {
  if (rank_ == 0) throw Error("distributed session: rank 0 drives; serve() is for the other ranks");
  for (;;) {
    StepMessage m;
    broadcast(nullptr, m);
    execute(m, nullptr);
    if (m.kind == StepKind::Shutdown) return false;
    if (m.kind == StepKind::Mark) return true;
  }
}

}  // namespace shardlm::parallel
