// Counters and latency histograms of the server, rendered in the Prometheus
// text exposition format. Every method may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace shardlm::serve {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1,     2.5,  5,     10,  30};
  void observe(double seconds);
  void render(std::string& out, const std::string& name, const std::string& help) const;

 private:
  std::array<uint64_t, kBounds.size()> counts_{};  // per bucket, not cumulative
  uint64_t count_ = 0;
  double sum_ = 0;
};

struct Gauges {
  int64_t running = 0;
  int64_t waiting = 0;
  int64_t kv_slots_used = 0;
  int64_t kv_slots = 0;
};

class Metrics {
 public:
  void count_request(int http_status);
  void count_tokens(int64_t prompt, int64_t cached, int64_t generated);
  void observe_ttft(double seconds);
  void observe_itl(double seconds);
  // A scheduler step: seconds in the engine, and in the scheduler around it
  // (batch building, handing tokens to requests): the server's own cost.
  void observe_step(bool with_prompt, double engine_seconds, double scheduler_seconds);
  std::string render(const Gauges& gauges) const;

 private:
  mutable std::mutex mu_;
  std::map<int, uint64_t> requests_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, itl_;
  struct StepTotals {
    uint64_t count = 0;
    double engine_seconds = 0, scheduler_seconds = 0;
  };
  std::array<StepTotals, 2> steps_;  // decode-only steps, steps with prompt entries
};

}  // namespace shardlm::serve
