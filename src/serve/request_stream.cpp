#include "serve/request_stream.h"

#include <utility>

namespace shardlm::serve {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::Stop: return "stop";
    case FinishReason::Length: return "length";
    case FinishReason::Cancelled: return "cancelled";
    case FinishReason::Error: return "error";
    case FinishReason::None: break;
  }
  return "none";
}

RequestStream::Chunk RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return done_ || !text_.empty() || !logprobs_.empty(); });
  return Chunk{std::exchange(text_, {}), std::exchange(logprobs_, {}), done_, finish_, error_};
}

RequestStream::Chunk RequestStream::wait_all() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_; });
  return Chunk{std::exchange(text_, {}), std::exchange(logprobs_, {}), true, finish_, error_};
}

std::optional<RequestStream::Chunk> RequestStream::wait_all(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return done_; })) return std::nullopt;
  return Chunk{std::exchange(text_, {}), std::exchange(logprobs_, {}), true, finish_, error_};
}

Usage RequestStream::usage() const {
  std::lock_guard lock(mu_);
  return usage_;
}

void RequestStream::append(const std::string& text, int64_t completion_tokens, std::vector<LogprobEntry> logprobs) {
  {
    std::lock_guard lock(mu_);
    text_ += text;
    for (LogprobEntry& e : logprobs) logprobs_.push_back(std::move(e));
    usage_.completion_tokens = completion_tokens;
  }
  cv_.notify_all();
}

void RequestStream::set_prompt(int64_t prompt_tokens, int64_t cached_tokens) {
  std::lock_guard lock(mu_);
  usage_.prompt_tokens = prompt_tokens;
  usage_.cached_tokens = cached_tokens;
}

void RequestStream::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    finish_ = reason;
    error_ = std::move(error);
  }
  cv_.notify_all();
}

}  // namespace shardlm::serve
