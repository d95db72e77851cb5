// What one request's client sees of its sequence: text as it is generated,
// then how it ended. The scheduler writes, one client thread reads; cancel()
// (a client gone) frees the slot at the scheduler's next step.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace shardlm::serve {

enum class FinishReason { None, Stop, Length, Cancelled, Error };
const char* finish_reason_name(FinishReason r);  // OpenAI's "stop" / "length"; ours otherwise

// A token as the response's log-probabilities show it.
struct TokenChoice {
  std::string token;  // its bytes (special tokens as their text)
  float logprob = 0;
};

// One generated token's log-probabilities (SamplerParams::logprobs).
struct LogprobEntry {
  TokenChoice chosen;
  std::vector<TokenChoice> top;  // most likely first
  // Characters the token adds to the reply's text: none for a special token
  // the text leaves out; a character split over tokens counts with its end.
  int64_t text_chars = 0;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of prompt_tokens, reused from a slot's cache
  int64_t completion_tokens = 0;
};

class RequestStream {
 public:
  struct Chunk {
    std::string text;
    std::vector<LogprobEntry> logprobs;  // of the tokens whose text is in `text`, when asked
    bool done = false;
    FinishReason finish = FinishReason::None;
    std::string error;  // when finish == Error
  };
  // Text produced since the last call, waiting up to `timeout` for some (or the end).
  Chunk next(std::chrono::milliseconds timeout);
  // Blocks until the end; all the text.
  Chunk wait_all();
  // The same, or nothing when the end has not come within `timeout`.
  std::optional<Chunk> wait_all(std::chrono::milliseconds timeout);
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  Usage usage() const;

  // Scheduler side.
  void append(const std::string& text, int64_t completion_tokens, std::vector<LogprobEntry> logprobs = {});
  void set_prompt(int64_t prompt_tokens, int64_t cached_tokens);
  void finish(FinishReason reason, std::string error = {});

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::string text_;
  std::vector<LogprobEntry> logprobs_;
  Usage usage_;
  bool done_ = false;
  FinishReason finish_ = FinishReason::None;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

}  // namespace shardlm::serve
