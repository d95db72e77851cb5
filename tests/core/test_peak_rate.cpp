#include <gtest/gtest.h>

#include "core/cpu.h"
#include "core/peak_rate.h"

namespace shardlm {
namespace {

// Every ISA this CPU has runs its timing loops (the AMX one included, which
// needs the tile permission cpu_caps() asked for) and names what it timed.
// Rates are only checked against each other, with a wide margin: ctest runs
// tests side by side, under sanitizers too, so absolute rates mean nothing here.
TEST(PeakRate, EachAvailableIsaTimesItsInstructions) {
  const PeakRates scalar = measure_peak_rates(Isa::Scalar, 0.001);
  EXPECT_EQ(scalar.int8_mac_per_s, 0);
  EXPECT_TRUE(scalar.int8_instruction.empty());
  double vnni = 0;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (!isa_available(isa)) continue;
    const PeakRates p = measure_peak_rates(isa, 0.02);
    SCOPED_TRACE(isa_name(isa));
    EXPECT_FALSE(p.int8_instruction.empty());
    EXPECT_FALSE(p.f32_instruction.empty());
    EXPECT_GT(p.f32_flop_per_s, 0);
    EXPECT_GT(p.int8_mac_per_s, 0);
    if (isa == Isa::Avx512) vnni = p.int8_mac_per_s;
    // A tile product is 256 vpdpbusd's work and takes far less than 256 times as long.
    if (isa == Isa::Amx && vnni > 0) {
      EXPECT_GT(p.int8_mac_per_s, 2 * vnni);
    }
  }
}

}  // namespace
}  // namespace shardlm
