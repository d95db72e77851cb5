// The message of the shardlm::Error a call throws, for tests of error texts.
#pragma once

#include <functional>
#include <string>

#include "core/error.h"

namespace shardlm::test {

// f()'s Error message; "" when it returns.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace shardlm::test
