// Small text helpers shared by the readers of hand-written input (node
// lists, hostfiles, key files, chat lines).
#pragma once

#include <string_view>

namespace shardlm {

// `s` without the spaces, tabs and carriage returns at its ends.
inline std::string_view strip_blanks(std::string_view s) {
  const size_t first = s.find_first_not_of(" \t\r");
  if (first == std::string_view::npos) return {};
  return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

}  // namespace shardlm
