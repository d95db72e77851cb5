#include <gtest/gtest.h>

#include <cstdlib>

#include "core/env.h"
#include "core/error.h"

namespace shardlm {
namespace {

constexpr const char* kName = "SHARDLM_TEST_ENV_BYTES";

TEST(EnvBytes, ReadsDigitsFallsBackWhenUnsetAndRefusesTheRest) {
  unsetenv(kName);
  EXPECT_EQ(env_bytes(kName, 7), 7u);
  setenv(kName, "", 1);
  EXPECT_EQ(env_bytes(kName, 7), 7u);
  setenv(kName, "65536", 1);
  EXPECT_EQ(env_bytes(kName, 7), 65536u);
  for (const char* bad : {"64k", "-5", " 5", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    setenv(kName, bad, 1);
    try {
      env_bytes(kName, 7);
      ADD_FAILURE() << "accepted";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string(kName) + "='" + bad + "' is not a byte count");
    }
  }
  unsetenv(kName);
}

}  // namespace
}  // namespace shardlm
