#include "serve/reasoning.h"

#include <utility>

#include "core/text.h"

namespace shardlm::serve {
namespace {

constexpr std::string_view kOpen = "<think>", kClose = "</think>";

}  // namespace

bool template_thinks(std::string_view template_source) { return template_source.find(kClose) != std::string_view::npos; }

bool prompt_opens_thinking(std::string_view rendered_prompt) {
  return without_trailing(rendered_prompt, kBlanksAndLineEnds).ends_with(kOpen);
}

ReasonedReply split_reasoning(std::string_view reply, bool starts_thinking) {
  std::string_view body = reply;
  if (!starts_thinking) {
    const std::string_view start = without_leading(reply, kBlanksAndLineEnds);
    if (!start.starts_with(kOpen)) return {{}, std::string(reply)};
    body = start.substr(kOpen.size());
  }
  const size_t close = body.find(kClose);
  if (close == std::string_view::npos) return {std::string(without_ends(body, kBlanksAndLineEnds)), {}};
  return {std::string(without_ends(body.substr(0, close), kBlanksAndLineEnds)),
          std::string(without_leading(body.substr(close + kClose.size()), kBlanksAndLineEnds))};
}

ReasoningSplitter::ReasoningSplitter(bool starts_thinking)
    : state_(starts_thinking ? State::Thinking : State::Start) {}

ReasonedReply ReasoningSplitter::push(std::string_view text) {
  held_ += text;
  ReasonedReply out;
  for (;;) {
    if (state_ == State::Start) {
      const std::string_view start = without_leading(held_, kBlanksAndLineEnds);
      if (start.starts_with(kOpen)) {
        held_.erase(0, held_.size() - start.size() + kOpen.size());
        state_ = State::Thinking;
        continue;
      }
      if (start.empty() || kOpen.starts_with(start)) return out;  // may still open a think block
      state_ = State::Answer;
      answer_begun_ = true;  // a reply without reasoning is content as it came, blanks and all
      continue;
    }
    if (state_ == State::Thinking) {
      if (!reasoning_begun_) held_.erase(0, held_.size() - without_leading(held_, kBlanksAndLineEnds).size());
      const size_t close = held_.find(kClose);
      const std::string_view before = std::string_view(held_).substr(
          0, close == std::string::npos ? held_.size() - partial_start_at_end(held_, kClose) : close);
      const std::string_view sure = without_trailing(before, kBlanksAndLineEnds);  // blanks before the close are dropped
      out.reasoning += sure;
      reasoning_begun_ = reasoning_begun_ || !sure.empty();
      if (close == std::string::npos) {
        held_.erase(0, sure.size());
        return out;
      }
      held_.erase(0, close + kClose.size());
      state_ = State::Answer;
      continue;
    }
    if (!answer_begun_) held_.erase(0, held_.size() - without_leading(held_, kBlanksAndLineEnds).size());
    answer_begun_ = answer_begun_ || !held_.empty();
    out.content += std::exchange(held_, {});
    return out;
  }
}

ReasonedReply ReasoningSplitter::finish() {
  ReasonedReply out;
  if (state_ == State::Start) out.content = held_;
  else if (state_ == State::Thinking) out.reasoning = without_trailing(held_, kBlanksAndLineEnds);
  held_.clear();
  return out;
}

}  // namespace shardlm::serve
