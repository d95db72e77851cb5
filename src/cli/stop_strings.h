// --stop STR: generation ends at the first occurrence of any stop string,
// which is not printed. Text that could still be the start of a stop string
// is held back until the next piece shows whether it is one.
#pragma once

#include <string>
#include <vector>

namespace shardlm::cli {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops);
  // The text that may be printed now. After a stop string matched, stopped()
  // is true and later pieces are ignored.
  std::string push(const std::string& piece);
  std::string flush();  // what was held back (no stop string can match any more)
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace shardlm::cli
