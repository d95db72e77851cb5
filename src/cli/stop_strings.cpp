#include "cli/stop_strings.h"

#include <algorithm>

namespace shardlm::cli {

StopStrings::StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {
  std::erase(stops_, std::string());
}

std::string StopStrings::push(const std::string& piece) {
  if (stopped_) return "";
  held_ += piece;
  size_t first = std::string::npos;
  for (const auto& s : stops_) first = std::min(first, held_.find(s));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, first);
    held_.clear();
    return out;
  }
  // Keep the longest tail of held_ that begins some stop string.
  size_t keep = 0;
  for (const auto& s : stops_)
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopStrings::flush() {
  std::string out;
  if (!stopped_) out.swap(held_);
  return out;
}

}  // namespace shardlm::cli
