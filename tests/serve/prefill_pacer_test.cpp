// PrefillPacer on made-up step times: probes, then sizes the prompt chunk so
// that a step beside decoding sequences lasts about `ratio` decode-only steps.
#include <gtest/gtest.h>

#include "serve/prefill_pacer.h"

namespace shardlm::serve {
namespace {

// A step of a few decode entries and p prompt tokens on a made-up machine: 40 ms plus 6 ms per prompt token.
double step_seconds(int64_t p) { return 0.040 + 0.006 * double(p); }

TEST(PrefillPacer, ProbesThenKeepsMixedStepsWithinTheRatio) {
  PrefillPacer pacer(2.0);
  EXPECT_EQ(pacer.budget(0, 256), 256) << "nothing decodes: the whole budget";
  EXPECT_EQ(pacer.budget(4, 256), PrefillPacer::kProbeTokens) << "costs unknown: a probe";
  pacer.observe(0, 4, step_seconds(0));
  EXPECT_EQ(pacer.budget(4, 256), PrefillPacer::kProbeTokens) << "the prompt token's cost is still unknown";
  for (int i = 0; i < 20; ++i) {
    const int64_t p = pacer.budget(4, 256);
    pacer.observe(p, 4, step_seconds(p));
    pacer.observe(0, 4, step_seconds(0));
  }
  // (2 - 1) × 40 ms of room at 6 ms per token.
  EXPECT_EQ(pacer.budget(4, 256), 6);
  EXPECT_EQ(pacer.budget(4, 5), 5) << "the token budget still caps it";
  EXPECT_LE(step_seconds(pacer.budget(4, 256)), 2.0 * step_seconds(0) + 1e-9);
}

TEST(PrefillPacer, FollowsTheMachineAndNeverStarvesThePrompt) {
  PrefillPacer pacer(3.0);
  pacer.observe(0, 2, 0.010);
  pacer.observe(4, 2, 0.010 + 4 * 0.0011);
  EXPECT_EQ(pacer.budget(2, 256), 18);  // (3 - 1) × 10 ms at 1.1 ms per token
  for (int i = 0; i < 40; ++i) pacer.observe(10, 2, 0.010 + 10 * 0.100);  // prompt tokens became slow
  EXPECT_EQ(pacer.budget(2, 256), 1) << "at least one prompt token per step";
}

TEST(PrefillPacer, RatioOfOneOrLessDoesNotPace) {
  PrefillPacer pacer(0);
  pacer.observe(0, 4, 0.040);
  pacer.observe(8, 4, 1.0);
  EXPECT_EQ(pacer.budget(4, 256), 256);
}

}  // namespace
}  // namespace shardlm::serve
