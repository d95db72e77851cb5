// Continuous batching over an Engine. Each step: drop cancelled requests,
// admit waiting ones into free KV slots (prefix reuse: PrefixSlots), give
// every decoding sequence one entry, then fill the step's prompt budget with
// prompt chunks (chunked prefill, so running streams keep producing tokens
// while a long prompt is read; beside decoding sequences the budget is paced
// by time, PrefillPacer; shortest remainder first, and prompts read side by
// side finish in the same step, prompt_chunks.h), run the engine and hand
// each sampled token to its request. A sequence ends on max tokens, the end
// of the context, an end-of-generation token, a stop string or cancellation.
//
// Why streams should start together: a decode step of 8 sequences costs
// well under 8 steps of one, so each stream's rate depends mostly on what
// else its steps carry. Prompt tokens read beside a stream lengthen its
// steps; prompts that arrive together are therefore read together (nobody
// is decoding yet, so the step is not paced) and start decoding in one step,
// and a burst reaching an idle engine is gathered for a few milliseconds
// first (burst_gap), since clients' requests of one burst arrive spread over
// the HTTP threads. Streams started together with equal lengths also end
// together, so their clients' next requests form the next burst. Prompts
// arriving while streams decode are paced beside them as before: holding
// them until the running streams end would cost their time to first token
// a whole generation.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "serve/engine.h"
#include "serve/metrics.h"
#include "serve/prefill_pacer.h"
#include "serve/prefix_slots.h"
#include "serve/request_stream.h"
#include "serve/stop_text.h"

namespace shardlm::serve {

struct GenerationRequest {
  std::vector<TokenId> prompt;  // not empty, shorter than the context
  SamplerParams sampling;
  int64_t max_tokens = -1;      // < 0: until the context is full
  std::vector<std::string> stop;
  std::vector<TokenId> shown_special;  // special tokens whose text the reply keeps (tool-call markers)
};

struct SchedulerOptions {
  int max_waiting = 64;          // submit() beyond this throws QueueFull
  int64_t prefill_budget = 256;  // prompt tokens per step, over all prefilling sequences
  // > 1: beside decoding sequences, a step's prompt tokens are also limited so
  // that it lasts at most this many times a decode-only step (PrefillPacer).
  double prefill_step_ratio = 0;
  // Prompts read side by side finish in the same step when all of them fit
  // in this many steps' budgets (prompt_chunks.h); 0: each as soon as it can.
  int64_t cohort_steps = 8;
  // A request reaching an idle engine waits until no other has arrived for
  // burst_gap (at most burst_max), so a burst of requests starts as one
  // cohort instead of its first one decoding beside the others' prompts.
  std::chrono::microseconds burst_gap{std::chrono::milliseconds(5)}, burst_max{std::chrono::milliseconds(30)};
  // A failed step is logged as an error (a server's operator sees it; its
  // clients get it in their responses). `run` prints it once itself.
  bool log_failed_steps = true;
};

class QueueFull : public Error {
 public:
  using Error::Error;
};

class Scheduler {
 public:
  // `engine` and `tok` must outlive the scheduler; metrics may be null.
  Scheduler(Engine& engine, const Tokenizer& tok, SchedulerOptions options, Metrics* metrics = nullptr);
  ~Scheduler();

  // Throws Error for an empty or too long prompt, QueueFull when the queue is full.
  std::shared_ptr<RequestStream> submit(GenerationRequest request);

  // Runs steps on a thread of its own until the scheduler is destroyed.
  void start();
  // One step, for callers driving the scheduler themselves (tests); false when idle.
  bool step();
  // Entries of the last step: (prompt entries, decode entries).
  std::pair<int64_t, int64_t> last_step_entries() const { return last_step_; }
  Gauges gauges() const;
  // The engine's health(): empty while it can run steps.
  std::string health() const { return engine_.health(); }
  std::vector<std::string> nodes() const { return engine_.nodes(); }

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    GenerationRequest request;
    std::shared_ptr<RequestStream> stream;
    Clock::time_point arrival;
  };
  struct Running {
    std::shared_ptr<RequestStream> stream;
    GenerationRequest request;
    SlotId slot = 0;
    int64_t cached = 0;      // prompt tokens reused from the slot's cache
    int64_t n_past = 0;      // positions in the cache
    int64_t generated = 0;
    TokenId next = -1;       // sampled, to be fed at position n_past
    StopText text;
    Clock::time_point arrival, last_token;
  };

  void drop_cancelled();
  bool has_waiting() const;
  void admit();
  void on_token(Running& r, const SampledToken& sampled);
  void end(Running& r, FinishReason reason, std::string error = {});
  void loop();
  void gather_burst(std::unique_lock<std::mutex>& lock);

  Engine& engine_;
  const Tokenizer& tok_;
  SchedulerOptions opt_;
  Metrics* metrics_;
  PrefixSlots slots_;
  PrefillPacer pacer_;

  mutable std::mutex mu_;  // guards waiting_, stopping_ and the gauges' copies
  std::condition_variable cv_;
  std::deque<Waiting> waiting_;
  bool stopping_ = false;
  int64_t n_running_ = 0;

  std::vector<std::unique_ptr<Running>> running_;  // only the stepping thread touches these
  std::vector<StepEntry> entries_;
  std::vector<Running*> entry_owner_;
  std::vector<Running*> prefilling_;  // this step's sequences still reading their prompt
  std::vector<int64_t> remainders_;   // their prompt tokens left, shortest first
  std::pair<int64_t, int64_t> last_step_{0, 0};
  std::thread thread_;
};

}  // namespace shardlm::serve
