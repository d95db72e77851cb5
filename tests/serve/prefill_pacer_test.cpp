// PrefillPacer on made-up step times: probes, then sizes the prompt chunk so
// that a step beside decoding sequences lasts about `ratio` decode-only steps.
#include <gtest/gtest.h>

#include "serve/prefill_pacer.h"

namespace shardlm::serve {
namespace {

// A step of a few decode entries and p prompt tokens on a made-up machine: 40 ms plus 2 ms per prompt token.
double step_seconds(int64_t p) { return 0.040 + 0.002 * double(p); }

TEST(PrefillPacer, ProbesThenKeepsMixedStepsWithinTheRatio) {
  PrefillPacer pacer(2.0);
  EXPECT_EQ(pacer.budget(0, 256), 256) << "nothing decodes: the whole budget";
  EXPECT_EQ(pacer.budget(4, 256), PrefillPacer::kMinTokens) << "costs unknown: a probe";
  pacer.observe(0, 4, step_seconds(0));
  EXPECT_EQ(pacer.budget(4, 256), PrefillPacer::kMinTokens) << "the prompt token's cost is still unknown";
  for (int i = 0; i < 20; ++i) {
    const int64_t p = pacer.budget(4, 256);
    pacer.observe(p, 4, step_seconds(p));
    pacer.observe(0, 4, step_seconds(0));
  }
  // (2 - 1) × 40 ms of room at 2 ms per token.
  EXPECT_EQ(pacer.budget(4, 256), 20);
  EXPECT_EQ(pacer.budget(4, 5), 5) << "the token budget still caps it";
  EXPECT_LE(step_seconds(pacer.budget(4, 256)), 2.0 * step_seconds(0) + 1e-9);
}

TEST(PrefillPacer, FollowsTheMachineAndNeverStarvesThePrompt) {
  PrefillPacer pacer(3.0);
  pacer.observe(0, 2, 0.010);
  pacer.observe(4, 2, 0.010 + 4 * 0.0011);
  EXPECT_EQ(pacer.budget(2, 256), 18);  // (3 - 1) × 10 ms at 1.1 ms per token
  for (int i = 0; i < 40; ++i) pacer.observe(10, 2, 0.010 + 10 * 0.100);  // prompt tokens became slow
  EXPECT_EQ(pacer.budget(2, 256), PrefillPacer::kMinTokens) << "a floor of prompt tokens per step";
  EXPECT_EQ(pacer.budget(2, 3), 3);
}

// Decode-only steps of 2 and of 8 sequences cost differently (20 ms + 5 ms a
// sequence) and a mixed step pays 10 ms more than its decode entries and its
// 1 ms per prompt token. A mean over all decode-only steps as the baseline of
// the prompt tokens' cost (the former estimate) misjudged both.
TEST(PrefillPacer, FitsDecodeStepsBySizeAndTheMixedStepsFixedCost) {
  const auto machine = [](int64_t p, int64_t d) { return 0.020 + 0.005 * double(d) + (p > 0 ? 0.010 + 0.001 * double(p) : 0); };
  PrefillPacer pacer(2.0);
  for (int i = 0; i < 60; ++i) {
    const int64_t d = i % 3 == 0 ? 2 : 8;
    pacer.observe(0, d, machine(0, d));
    const int64_t p = pacer.budget(d, 256);
    pacer.observe(p, d, machine(p, d));
  }
  // Room (2 - 1) × the decode step (30 or 60 ms) less the fixed 10 ms, at 1 ms a token: 20 and 50 tokens.
  EXPECT_NEAR(double(pacer.budget(2, 256)), 20, 1.0);
  EXPECT_NEAR(double(pacer.budget(8, 256)), 50, 1.0);
  for (const int64_t d : {2, 8})
    EXPECT_LE(machine(pacer.budget(d, 256), d), 2.0 * machine(0, d) * 1.1) << d << " decoding";
}

TEST(PrefillPacer, RatioOfOneOrLessDoesNotPace) {
  PrefillPacer pacer(0);
  pacer.observe(0, 4, 0.040);
  pacer.observe(8, 4, 1.0);
  EXPECT_EQ(pacer.budget(4, 256), 256);
}

}  // namespace
}  // namespace shardlm::serve
