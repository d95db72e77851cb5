#include <gtest/gtest.h>

#include "core/cpu.h"
#include "core/peak_rate.h"

namespace shardlm {
namespace {

// Every ISA this CPU has runs its timing loops (the AMX one included, which
// needs the tile permission cpu_caps() asked for) and names what it timed;
// the wider paths must sustain more multiply-adds than the narrower ones.
TEST(PeakRate, EachAvailableIsaTimesItsInstructions) {
  const PeakRates scalar = measure_peak_rates(Isa::Scalar, 0.001);
  EXPECT_EQ(scalar.int8_mac_per_s, 0);
  EXPECT_TRUE(scalar.int8_instruction.empty());
  double narrower = 0;
  for (Isa isa : {Isa::Avx2, Isa::Avx512, Isa::Amx}) {
    if (!isa_available(isa)) continue;
    const PeakRates p = measure_peak_rates(isa, 0.004);
    SCOPED_TRACE(isa_name(isa));
    EXPECT_FALSE(p.int8_instruction.empty());
    EXPECT_FALSE(p.f32_instruction.empty());
    EXPECT_GT(p.f32_flop_per_s, 1e9);
    EXPECT_GT(p.int8_mac_per_s, 1e9);
    if (isa == Isa::Amx) EXPECT_GT(p.int8_mac_per_s, narrower);  // a tile product is 256 vpdpbusd's work
    narrower = p.int8_mac_per_s;
  }
}

}  // namespace
}  // namespace shardlm
