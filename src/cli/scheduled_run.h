// `shardlm run`'s one generation loop, on one machine and on a cluster: the
// prompt goes through serve::Scheduler over whichever Engine, driven on this
// thread, and the text is printed as the request's stream delivers it (end
// of generation, --stop strings and the context's end are the scheduler's).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "serve/engine.h"
#include "serve/request_stream.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {

struct ScheduledRunRequest {
  std::string prompt_text;      // printed first unless display_prompt is false
  std::vector<TokenId> prompt;
  SamplerParams sampling;
  int64_t max_tokens = -1;      // < 0: until the context is full
  std::vector<std::string> stops;
  bool display_prompt = true;
  int64_t prefill_budget = 512; // prompt tokens per step
  const std::atomic<bool>* interrupted = nullptr;  // cancels between steps
};

struct ScheduledRunResult {
  int64_t generated = 0;
  double prompt_seconds = 0;  // up to the first token
  double decode_seconds = 0;  // after it
  serve::FinishReason finish = serve::FinishReason::None;
  bool context_full = false;  // stopped at the end of the context before max_tokens
};

// Writes `text` to stdout at once: streamed text shows as it is generated.
void print_now(const std::string& text);

// Throws Error when the engine failed (its message names the node on a cluster).
ScheduledRunResult run_scheduled(serve::Engine& engine, const Tokenizer& tok, const ScheduledRunRequest& r);

// Why a prompt of `tokens` cannot run in a context of `ctx` positions (none
// or all of them: the prompt must leave one for the first generated token);
// empty when it can.
std::string prompt_fit_problem(size_t tokens, int64_t ctx);

}  // namespace shardlm::cli
