#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/cpu.h"
#include "core/error.h"

namespace shardlm {
namespace {

TEST(Cpu, CapabilitiesAreConsistent) {
  const CpuCaps& c = cpu_caps();
  EXPECT_TRUE(!c.avx512 || c.avx2);
  EXPECT_TRUE(!(c.avx512_vnni || c.avx512_bf16) || c.avx512);
  EXPECT_TRUE(!(c.amx_int8 || c.amx_bf16) || c.avx512);
  EXPECT_TRUE(isa_available(Isa::Scalar));
  EXPECT_EQ(isa_available(Isa::Avx2), c.avx2);
  EXPECT_EQ(isa_available(Isa::Avx512), c.avx512);
  EXPECT_TRUE(isa_available(active_isa()));
}

TEST(Cpu, SummaryNamesActiveIsa) {
  const std::string s = cpu_summary();
  EXPECT_NE(s.find(std::string("kernels: ") + isa_name(active_isa())), std::string::npos) << s;
}

TEST(Cpu, IsaNames) {
  EXPECT_STREQ(isa_name(Isa::Scalar), "scalar");
  EXPECT_STREQ(isa_name(Isa::Avx2), "avx2");
  EXPECT_STREQ(isa_name(Isa::Avx512), "avx512");
  EXPECT_STREQ(isa_name(Isa::Amx), "amx");
}

// The choice is made once per process, so each case runs in a fresh child.
int active_isa_with_env(const char* value) {
  setenv("SHARDLM_ISA", value, 1);
  try {
    return int(active_isa());
  } catch (const Error&) {
    return 42;
  }
}

TEST(CpuDeathTest, EnvironmentCapsTheIsa) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(std::exit(active_isa_with_env("scalar")), testing::ExitedWithCode(int(Isa::Scalar)), "");
  const int avx2_expected = isa_available(Isa::Avx2) ? int(Isa::Avx2) : int(Isa::Scalar);
  EXPECT_EXIT(std::exit(active_isa_with_env("avx2")), testing::ExitedWithCode(avx2_expected), "");
  // The AVX2 class with AVX-VNNI's dot products where the CPU has them.
  EXPECT_EXIT(std::exit(active_isa_with_env("avx_vnni")), testing::ExitedWithCode(avx2_expected), "");
  EXPECT_EXIT(std::exit(active_isa_with_env("sse9")), testing::ExitedWithCode(42), "");
}

}  // namespace
}  // namespace shardlm
