#include "serve/stop_text.h"

#include <algorithm>
#include <utility>

namespace shardlm::serve {

StopText::StopText(const Tokenizer& tok, std::vector<std::string> stops)
    : decoder_(tok, /*at_sequence_start=*/false), stops_(std::move(stops)) {
  std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
}

StopText::Out StopText::push(TokenId token) {
  held_ += decoder_.push(token);
  return release();
}

StopText::Out StopText::release() {
  size_t first_match = std::string::npos;
  for (const auto& s : stops_) first_match = std::min(first_match, held_.find(s));
  if (first_match != std::string::npos) {
    Out out{held_.substr(0, first_match), true};
    held_.clear();
    return out;
  }
  // Longest tail of the held text that begins some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  Out out{held_.substr(0, held_.size() - keep), false};
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopText::finish() {
  held_ += decoder_.flush();
  Out out = release();
  return out.stopped ? out.text : out.text + std::exchange(held_, {});
}

}  // namespace shardlm::serve
