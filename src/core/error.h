// One error type for everything a user can cause (bad file, bad flag, bad
// peer). The message is one line naming what is wrong and where.
#pragma once

#include <stdexcept>
#include <string>

namespace shardlm {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace shardlm
