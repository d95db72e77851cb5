#include "cli/scheduled_run.h"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>

#include "core/clock.h"
#include "core/error.h"
#include "serve/scheduler.h"

namespace shardlm::cli {

void print_now(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

std::string prompt_fit_problem(size_t tokens, int64_t ctx) {
  if (tokens == 0) return "the prompt has no tokens (and the vocabulary adds no BOS)";
  if (int64_t(tokens) >= ctx)
    return fmt::format("the prompt has {} tokens; --ctx {} must be larger (the prompt and the tokens generated)", tokens, ctx);
  return {};
}

ScheduledRunResult run_scheduled(serve::Engine& engine, const Tokenizer& tok, const ScheduledRunRequest& r) {
  serve::SchedulerOptions so;
  so.max_waiting = 1;
  so.prefill_budget = r.prefill_budget;
  so.log_failed_steps = false;  // the error ends the run with one line of its own
  serve::Scheduler scheduler(engine, tok, so);
  if (r.display_prompt) print_now(r.prompt_text);
  ScheduledRunResult out;
  if (r.max_tokens == 0) {  // nothing to generate
    print_now("\n");
    return out;
  }
  auto stream = scheduler.submit({r.prompt, r.sampling, r.max_tokens, r.stops, {}});
  const auto t0 = SteadyClock::now();
  SteadyClock::time_point first{};
  for (;;) {
    if (r.interrupted && r.interrupted->load()) stream->cancel();
    const bool busy = scheduler.step();
    const auto chunk = stream->next(std::chrono::milliseconds(0));
    print_now(chunk.text);
    if (first == SteadyClock::time_point{} && stream->usage().completion_tokens > 0) first = SteadyClock::now();
    if (chunk.done) {
      out.finish = chunk.finish;
      if (chunk.finish == serve::FinishReason::Error) throw Error(chunk.error);
      break;
    }
    if (!busy) throw Error("run: the scheduler went idle before the request ended");
  }
  const auto t1 = SteadyClock::now();
  print_now("\n");
  out.generated = stream->usage().completion_tokens;
  if (first == SteadyClock::time_point{}) first = t1;
  out.prompt_seconds = seconds_of(first - t0);
  out.decode_seconds = seconds_of(t1 - first);
  out.context_full = out.finish == serve::FinishReason::Length &&
                     (r.max_tokens < 0 || out.generated < r.max_tokens);
  return out;
}

}  // namespace shardlm::cli
