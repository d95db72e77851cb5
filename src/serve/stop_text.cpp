#include "serve/stop_text.h"

#include <algorithm>
#include <utility>

#include "core/text.h"

namespace shardlm::serve {

StopText::StopText(const Tokenizer& tok, std::vector<std::string> stops, std::vector<TokenId> shown_special)
    : tok_(tok), decoder_(tok, /*at_sequence_start=*/false, std::move(shown_special)), stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

LogprobEntry StopText::entry(TokenId token, const SampledLogprobs& lp) const {
  LogprobEntry e{{tok_.token_to_piece(token, true), lp.logprob}, {}};
  for (const TokenLogprob& t : lp.top) e.top.push_back({tok_.token_to_piece(t.id, true), t.logprob});
  return e;
}

StopText::Out StopText::push(TokenId token, const SampledLogprobs* logprobs) {
  const uint64_t begin = sent_ + held_.size();
  const std::string text = decoder_.push(token);
  held_ += text;
  if (logprobs) {
    LogprobEntry e = entry(token, *logprobs);
    e.text_chars = utf8_chars(text);
    logprobs_.push_back({begin, sent_ + held_.size(), std::move(e)});
  }
  return release();
}

StopText::Out StopText::release() {
  size_t first_match = std::string::npos;
  for (const auto& s : stops_) first_match = std::min(first_match, held_.find(s));
  Out out;
  if (first_match != std::string::npos) {
    out = {held_.substr(0, first_match), true, {}};
    const uint64_t cut = sent_ + first_match;
    for (Held& h : logprobs_)
      if (h.begin < cut || h.end <= cut) out.logprobs.push_back(std::move(h.entry));
    logprobs_.clear();
    sent_ = cut;
    held_.clear();
    return out;
  }
  // Longest tail of the held text that begins some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) keep = std::max(keep, partial_start_at_end(held_, s));
  out.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  sent_ += out.text.size();
  for (; !logprobs_.empty() && logprobs_.front().end <= sent_; logprobs_.pop_front())
    out.logprobs.push_back(std::move(logprobs_.front().entry));
  return out;
}

StopText::Out StopText::finish() {
  held_ += decoder_.flush();
  Out out = release();
  if (out.stopped) return out;
  out.text += std::exchange(held_, {});
  for (Held& h : logprobs_) out.logprobs.push_back(std::move(h.entry));
  logprobs_.clear();
  return out;
}

}  // namespace shardlm::serve
