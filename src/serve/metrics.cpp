#include "serve/metrics.h"

#include <fmt/format.h>

namespace shardlm::serve {

void Histogram::observe(double seconds) {
  size_t i = 0;
  while (i < kBounds.size() && seconds > kBounds[i]) ++i;
  if (i < kBounds.size()) ++counts_[i];
  ++count_;
  sum_ += seconds;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, kBounds[i], cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n{}_sum {}\n{}_count {}\n", name, count_, name, sum_, name, count_);
}

void Metrics::count_request(int http_status) {
  std::lock_guard lock(mu_);
  ++requests_[http_status];
}

void Metrics::count_tokens(int64_t prompt, int64_t cached, int64_t generated) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += uint64_t(prompt);
  cached_tokens_ += uint64_t(cached);
  generated_tokens_ += uint64_t(generated);
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard lock(mu_);
  ttft_.observe(seconds);
}

void Metrics::observe_itl(double seconds) {
  std::lock_guard lock(mu_);
  itl_.observe(seconds);
}

void Metrics::observe_step(bool with_prompt, double engine_seconds, double scheduler_seconds) {
  std::lock_guard lock(mu_);
  auto& s = steps_[with_prompt ? 1 : 0];
  ++s.count;
  s.engine_seconds += engine_seconds;
  s.scheduler_seconds += scheduler_seconds;
}

std::string Metrics::render(const Gauges& g) const {
  std::lock_guard lock(mu_);
  std::string out;
  out += "# HELP shardlm_requests_total HTTP requests answered, by status code.\n# TYPE shardlm_requests_total counter\n";
  for (const auto& [status, n] : requests_) out += fmt::format("shardlm_requests_total{{status=\"{}\"}} {}\n", status, n);
  const auto counter = [&](const char* name, const char* help, auto v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n{} {}\n", name, help, name, name, v);
  };
  const auto gauge = [&](const char* name, const char* help, int64_t v) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n{} {}\n", name, help, name, name, v);
  };
  counter("shardlm_prompt_tokens_total", "Prompt tokens of finished requests.", prompt_tokens_);
  counter("shardlm_prompt_cached_tokens_total", "Prompt tokens reused from a slot's KV cache.", cached_tokens_);
  counter("shardlm_generation_tokens_total", "Generated tokens.", generated_tokens_);
  // By kind: "decode" steps have decode entries only, "prompt" steps read prompt tokens too.
  const auto by_kind = [&](const char* name, const char* help, auto field) {
    out += fmt::format("# HELP {} {}\n# TYPE {} counter\n", name, help, name);
    for (size_t k = 0; k < steps_.size(); ++k)
      out += fmt::format("{}{{kind=\"{}\"}} {}\n", name, k == 0 ? "decode" : "prompt", steps_[k].*field);
  };
  by_kind("shardlm_engine_steps_total", "Engine steps run by the scheduler.", &StepTotals::count);
  by_kind("shardlm_engine_step_seconds_total", "Seconds in engine steps.", &StepTotals::engine_seconds);
  by_kind("shardlm_scheduler_overhead_seconds_total",
          "Seconds the scheduler spent around engine steps (batching, handing tokens to requests).",
          &StepTotals::scheduler_seconds);
  ttft_.render(out, "shardlm_time_to_first_token_seconds", "Time from arrival to the first generated token.");
  itl_.render(out, "shardlm_inter_token_latency_seconds", "Time between consecutive generated tokens of a request.");
  gauge("shardlm_requests_running", "Sequences in KV slots (prefill or decode).", g.running);
  gauge("shardlm_requests_waiting", "Requests waiting for a slot.", g.waiting);
  gauge("shardlm_kv_slots_used", "KV cache slots held by running sequences.", g.kv_slots_used);
  gauge("shardlm_kv_slots", "KV cache slots.", g.kv_slots);
  return out;
}

}  // namespace shardlm::serve
