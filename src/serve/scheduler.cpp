#include "serve/scheduler.h"

#include "serve/prompt_chunks.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace shardlm::serve {

Scheduler::Scheduler(Engine& engine, const Tokenizer& tok, SchedulerOptions options, Metrics* metrics)
    : engine_(engine), tok_(tok), opt_(options), metrics_(metrics), slots_(engine.n_slots()),
      pacer_(options.prefill_step_ratio) {
  if (opt_.prefill_budget < 1) throw Error(fmt::format("scheduler: prefill budget {} must be positive", opt_.prefill_budget));
  if (engine.max_step_entries() <= engine.n_slots())
    throw Error(fmt::format("scheduler: {} entries per step leave no room for prompts beside {} decoding slots",
                            engine.max_step_entries(), engine.n_slots()));
}

Scheduler::~Scheduler() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  for (auto& r : running_) r->stream->finish(FinishReason::Error, "server shutting down");
  for (auto& w : waiting_) w.stream->finish(FinishReason::Error, "server shutting down");
}

std::shared_ptr<RequestStream> Scheduler::submit(GenerationRequest request) {
  if (request.prompt.empty()) throw Error("the prompt is empty");
  if (int64_t(request.prompt.size()) >= engine_.n_ctx())
    throw Error(fmt::format("the prompt has {} tokens; the context holds {} (prompt and completion)",
                            request.prompt.size(), engine_.n_ctx()));
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard lock(mu_);
    if (int64_t(waiting_.size()) >= opt_.max_waiting)
      throw QueueFull(fmt::format("the queue is full ({} requests waiting)", waiting_.size()));
    waiting_.push_back({std::move(request), stream, Clock::now()});
  }
  cv_.notify_all();
  return stream;
}

void Scheduler::start() { thread_ = std::thread([this] { loop(); }); }

void Scheduler::loop() {
  for (;;) {
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stopping_ || !waiting_.empty() || !running_.empty(); });
      if (running_.empty()) gather_burst(lock);
      if (stopping_) return;
    }
    step();
  }
}

// With mu_ held, on the stepping thread, while nothing runs: waits until no
// request has arrived for burst_gap, at most burst_max, or the slots are taken.
void Scheduler::gather_burst(std::unique_lock<std::mutex>& lock) {
  const auto until = Clock::now() + opt_.burst_max;
  size_t seen = waiting_.size();
  while (!stopping_ && int64_t(seen) < engine_.n_slots()) {
    const auto now = Clock::now();
    if (now >= until) break;
    if (!cv_.wait_until(lock, std::min(until, now + opt_.burst_gap),
                        [&] { return stopping_ || waiting_.size() != seen; }))
      break;
    seen = waiting_.size();
  }
}

bool Scheduler::has_waiting() const {
  std::lock_guard lock(mu_);
  return !waiting_.empty();
}

Gauges Scheduler::gauges() const {
  std::lock_guard lock(mu_);
  return {n_running_, int64_t(waiting_.size()), n_running_, engine_.n_slots()};
}

void Scheduler::drop_cancelled() {
  for (auto& r : running_)
    if (r->stream->cancelled()) end(*r, FinishReason::Cancelled);
  std::lock_guard lock(mu_);
  std::erase_if(waiting_, [](const Waiting& w) {
    if (!w.stream->cancelled()) return false;
    w.stream->finish(FinishReason::Cancelled);
    return true;
  });
}

void Scheduler::admit() {
  std::lock_guard lock(mu_);
  int64_t admitted = 0;
  Clock::time_point first{}, last{};
  while (!waiting_.empty()) {
    const auto choice = slots_.acquire(waiting_.front().request.prompt);
    if (!choice) break;
    Waiting w = std::move(waiting_.front());
    waiting_.pop_front();
    if (admitted++ == 0) first = w.arrival;
    last = w.arrival;
    engine_.add(choice->slot, w.request.sampling, std::span(w.request.prompt).first(size_t(choice->reused)));
    w.stream->set_prompt(int64_t(w.request.prompt.size()), choice->reused);
    auto stops = w.request.stop;
    running_.push_back(std::make_unique<Running>(Running{w.stream, std::move(w.request), choice->slot, choice->reused,
                                                         choice->reused, 0, -1, StopText(tok_, std::move(stops), w.request.shown_special),
                                                         w.arrival, w.arrival}));
  }
  if (admitted > 0)
    spdlog::debug("serve: admitted {} requests that arrived over {:.1f} ms beside {} running", admitted,
                  std::chrono::duration<double, std::milli>(last - first).count(), int64_t(running_.size()) - admitted);
  n_running_ = int64_t(running_.size());
}

bool Scheduler::step() {
  const auto t_begin = Clock::now();
  drop_cancelled();
  std::erase_if(running_, [](const auto& r) { return r->stream == nullptr; });
  if (running_.empty() && !engine_.health().empty() && has_waiting() && engine_.recover())
    slots_ = PrefixSlots(engine_.n_slots());  // a new engine: nothing of the old caches is there
  admit();
  if (running_.empty()) return false;

  entries_.clear();
  entry_owner_.clear();
  const auto add = [&](Running& r, TokenId token, bool sample) {
    entries_.push_back({r.slot, int32_t(r.n_past), token, sample});
    entry_owner_.push_back(&r);
    slots_.record(r.slot, int32_t(r.n_past), token);
    ++r.n_past;
  };
  for (auto& r : running_)
    if (r->next >= 0) add(*r, std::exchange(r->next, -1), true);
  const int64_t n_decode = int64_t(entries_.size());
  const int64_t budget = pacer_.budget(n_decode, std::min(opt_.prefill_budget, engine_.max_step_entries() - n_decode));
  // Shortest remainder first, prompts of a cohort finishing together (prompt_chunks.h).
  prefilling_.clear();
  for (auto& r : running_)
    if (r->generated == 0 && r->n_past < int64_t(r->request.prompt.size())) prefilling_.push_back(r.get());
  const auto remainder = [](const Running* r) { return int64_t(r->request.prompt.size()) - r->n_past; };
  std::stable_sort(prefilling_.begin(), prefilling_.end(),  // stable: otherwise arrival order
                   [&](const Running* x, const Running* y) { return remainder(x) < remainder(y); });
  remainders_.clear();
  for (const Running* r : prefilling_) remainders_.push_back(remainder(r));
  const auto chunks = plan_prompt_chunks(remainders_, budget, opt_.cohort_steps);
  for (size_t j = 0; j < prefilling_.size(); ++j) {
    Running& r = *prefilling_[j];
    const int64_t prompt_len = int64_t(r.request.prompt.size());
    for (int64_t i = 0; i < chunks[j]; ++i) add(r, r.request.prompt[size_t(r.n_past)], r.n_past + 1 == prompt_len);
  }
  last_step_ = {int64_t(entries_.size()) - n_decode, n_decode};
  if (entries_.empty()) return true;  // only sequences that ended this step

  std::vector<SampledToken> sampled;
  Clock::time_point t_engine, t_engine_end;
  try {
    t_engine = Clock::now();
    sampled = engine_.step(entries_);
    t_engine_end = Clock::now();
    const double seconds = std::chrono::duration<double>(t_engine_end - t_engine).count();
    spdlog::debug("serve: step of {} prompt (budget {}) and {} decode entries: {:.1f} ms", last_step_.first, budget,
                  n_decode, seconds * 1e3);
    pacer_.observe(last_step_.first, n_decode, seconds);
  } catch (const std::exception& e) {
    if (opt_.log_failed_steps) spdlog::error("serve: step of {} entries failed: {}", entries_.size(), e.what());
    for (auto& r : running_) end(*r, FinishReason::Error, e.what());
    running_.clear();
    std::lock_guard lock(mu_);
    n_running_ = 0;
    return true;
  }
  size_t k = 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].sample) on_token(*entry_owner_[i], sampled.at(k++));
  std::erase_if(running_, [](const auto& r) { return r->stream == nullptr; });
  if (metrics_) {
    const auto t_end = Clock::now();
    metrics_->observe_step(last_step_.first > 0, std::chrono::duration<double>(t_engine_end - t_engine).count(),
                           std::chrono::duration<double>((t_engine - t_begin) + (t_end - t_engine_end)).count());
  }
  std::lock_guard lock(mu_);
  n_running_ = int64_t(running_.size());
  return true;
}

void Scheduler::on_token(Running& r, const SampledToken& sampled) {
  const TokenId token = sampled.token;
  const auto now = Clock::now();
  if (metrics_) {
    const double since = std::chrono::duration<double>(now - r.last_token).count();
    if (r.generated == 0) metrics_->observe_ttft(since);
    else metrics_->observe_itl(since);
  }
  r.last_token = now;
  ++r.generated;
  if (tok_.is_end_of_generation(token)) {  // not part of the text: neither are its log-probabilities
    auto rest = r.text.finish();
    r.stream->append(rest.text, r.generated, std::move(rest.logprobs));
    return end(r, FinishReason::Stop);
  }
  auto out = r.text.push(token, sampled.logprobs ? &*sampled.logprobs : nullptr);
  if (out.stopped) {
    r.stream->append(out.text, r.generated, std::move(out.logprobs));
    return end(r, FinishReason::Stop);
  }
  const bool at_limit = r.request.max_tokens >= 0 && r.generated >= r.request.max_tokens;
  if (at_limit || r.n_past >= engine_.n_ctx()) {
    auto rest = r.text.finish();
    for (auto& e : rest.logprobs) out.logprobs.push_back(std::move(e));
    r.stream->append(out.text + rest.text, r.generated, std::move(out.logprobs));
    return end(r, FinishReason::Length);
  }
  r.stream->append(out.text, r.generated, std::move(out.logprobs));
  r.next = token;
}

// Frees the slot; the Running entry is erased by step() (stream reset marks it).
void Scheduler::end(Running& r, FinishReason reason, std::string error) {
  if (!r.stream) return;
  engine_.free(r.slot);
  slots_.release(r.slot);
  if (reason == FinishReason::Error) slots_.forget(r.slot);  // the failed step's tokens may not be in the cache
  if (metrics_) metrics_->count_tokens(int64_t(r.request.prompt.size()), r.cached, r.generated);
  r.stream->finish(reason, std::move(error));
  r.stream.reset();
}

}  // namespace shardlm::serve
