// The receive-side matching every backend shares (comm/inbox.h) and the one
// waiting rule (comm/wait_policy.h), without any transport around them.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "comm/inbox.h"
#include "comm/wait_policy.h"
#include "core/cpu.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

using namespace std::chrono_literals;

// Delivers `text` through `inbox` as a backend would: arrive, fill, complete.
bool deliver(Inbox& inbox, uint64_t tag, const std::string& text, bool ignore_budget = false) {
  Inbox::Delivery d = inbox.arrive(tag, text.size(), ignore_budget);
  if (!d) return false;
  if (!text.empty()) std::memcpy(d.data(), text.data(), text.size());
  inbox.complete(d);
  EXPECT_FALSE(d);
  return true;
}

struct InboxTest : ::testing::Test {
  size_t buffered = 0;
  Inbox inbox{"rank 1 (test)", buffered, 16};
  char buf[8] = {};
};

TEST_F(InboxTest, MessageForAPostedReceiveGoesStraightIntoItsBuffer) {
  RequestPtr r = inbox.post(1, 7, buf, sizeof buf);
  EXPECT_FALSE(r->done());
  Inbox::Delivery d = inbox.arrive(7, 3);
  ASSERT_TRUE(d);
  EXPECT_EQ(d.data(), reinterpret_cast<std::byte*>(buf));
  std::memcpy(d.data(), "abc", 3);
  inbox.complete(d);
  EXPECT_TRUE(r->done());
  EXPECT_EQ(r->bytes(), 3u);
  EXPECT_EQ(std::string(buf, 3), "abc");
  EXPECT_EQ(buffered, 0u);
  EXPECT_FALSE(inbox.has_posted());
}

TEST_F(InboxTest, EarlyMessageIsBufferedUntilItsReceiveIsPosted) {
  ASSERT_TRUE(deliver(inbox, 7, "hello"));
  EXPECT_EQ(buffered, 5u);
  RequestPtr other = inbox.post(1, 8, buf, sizeof buf);  // another tag: not taken
  EXPECT_FALSE(other->done());
  RequestPtr r = inbox.post(1, 7, buf, sizeof buf);
  ASSERT_TRUE(r->done());
  EXPECT_EQ(r->bytes(), 5u);
  EXPECT_EQ(std::string(buf, 5), "hello");
  EXPECT_EQ(buffered, 0u);
}

TEST_F(InboxTest, ReceiveClaimsAMessageStillArriving) {
  Inbox::Delivery d = inbox.arrive(7, 4);
  ASSERT_TRUE(d);
  RequestPtr r = inbox.post(1, 7, buf, sizeof buf);
  EXPECT_FALSE(r->done());
  std::memcpy(d.data(), "wxyz", 4);
  inbox.complete(d);
  ASSERT_TRUE(r->done());
  EXPECT_EQ(std::string(buf, 4), "wxyz");
  EXPECT_EQ(buffered, 0u);
}

TEST_F(InboxTest, SameTagMatchesInOrder) {
  char second[8] = {};
  RequestPtr a = inbox.post(1, 7, buf, sizeof buf);
  RequestPtr b = inbox.post(1, 7, second, sizeof second);
  ASSERT_TRUE(deliver(inbox, 7, "one"));
  ASSERT_TRUE(deliver(inbox, 7, "two"));
  EXPECT_EQ(std::string(buf, 3), "one");
  EXPECT_EQ(std::string(second, 3), "two");
  ASSERT_TRUE(deliver(inbox, 9, "x"));
  ASSERT_TRUE(deliver(inbox, 9, "y"));
  EXPECT_EQ(inbox.post(1, 9, buf, sizeof buf)->bytes(), 1u);
  EXPECT_EQ(buf[0], 'x');
}

TEST_F(InboxTest, BudgetGivesBackPressureUnlessTheMessageIsInHand) {
  ASSERT_TRUE(deliver(inbox, 1, "0123456789"));
  EXPECT_FALSE(inbox.arrive(2, 7));           // 10 + 7 > 16
  EXPECT_TRUE(deliver(inbox, 2, "", false));  // empty messages always fit
  EXPECT_TRUE(deliver(inbox, 2, "0123456", true));
  EXPECT_EQ(buffered, 17u);
  EXPECT_THROW(inbox.post(1, 1, nullptr, 0), Error);  // too small for the buffered 10 bytes
}

TEST_F(InboxTest, OversizedMessageNamesThePeer) {
  inbox.post(1, 7, buf, 2);
  try {
    inbox.arrive(7, 3);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 (test): message of 3 bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exceeds the receive buffer of 2 bytes"), std::string::npos) << e.what();
  }
}

TEST(WaitPolicy, RequestedSpinWinsOverTheRule) {
  const WaitPolicy p = choose_wait_policy(1000, 1000, 123us);
  EXPECT_EQ(p.spin, 123us);
  EXPECT_EQ(p.yield, 0us);
}

TEST(WaitPolicy, SpinsOnOwnCoresYieldsAmongOurRanksSpinsBrieflyUnderHeavyLoad) {
  const int cpus = usable_cpus();
  const WaitPolicy own = choose_wait_policy(1, cpus - 1, -1us);
  EXPECT_EQ(own.spin, kOwnCoreSpin);
  EXPECT_EQ(own.yield, 0us);
  const WaitPolicy ours = choose_wait_policy(cpus + 1, 0, -1us);
  EXPECT_EQ(ours.spin, 0us);
  EXPECT_EQ(ours.yield, kSharedCoreYield);
  for (int ranks : {1, cpus + 1}) {
    const WaitPolicy busy = choose_wait_policy(ranks, 2 * cpus, -1us);
    EXPECT_EQ(busy.spin, kCrowdedSpin);
    EXPECT_LT(kCrowdedSpin, kSharedCoreYield);  // less than the idle rules
    EXPECT_EQ(busy.yield, 0us);
  }
}

// A crowded instant (many runnable tasks) spins briefly only when tasks have
// been waiting for a core lately, or nobody knows: with the pressure low the
// count was a burst, and the own-core rule holds.
TEST(WaitPolicy, CrowdedCountNeedsCpuPressure) {
  const int cpus = usable_cpus();
  EXPECT_EQ(choose_wait_policy(1, 2 * cpus, -1us, 99.0).spin, kCrowdedSpin);
  EXPECT_EQ(choose_wait_policy(1, 2 * cpus, -1us, kCrowdedPressure).spin, kCrowdedSpin);
  EXPECT_EQ(choose_wait_policy(1, 2 * cpus, -1us, -1).spin, kCrowdedSpin);
  EXPECT_EQ(choose_wait_policy(1, 2 * cpus, -1us, 0.5).spin, kOwnCoreSpin);
  const WaitPolicy ours = choose_wait_policy(cpus + 1, 2 * cpus, -1us, 0.5);
  EXPECT_EQ(ours.spin, 0us);
  EXPECT_EQ(ours.yield, kSharedCoreYield);
  EXPECT_EQ(choose_wait_policy(1, 0, -1us, 99.0).spin, kOwnCoreSpin);  // pressure alone is not a crowd
}

TEST(WaitPolicy, ParsesCpuPressure) {
  EXPECT_DOUBLE_EQ(parse_cpu_pressure("some avg10=12.50 avg60=3.00 avg300=1.00 total=123\n"
                                      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
                   12.5);
  EXPECT_DOUBLE_EQ(parse_cpu_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"), 0.0);
  EXPECT_EQ(parse_cpu_pressure(""), -1);
  EXPECT_EQ(parse_cpu_pressure("full avg10=5.00 avg60=0.00\n"), -1);
  EXPECT_EQ(parse_cpu_pressure("some avg10=x"), -1);
  EXPECT_EQ(parse_cpu_pressure("some avg10=250.0"), -1);
}

TEST(WaitPolicy, ReadsTheHostLoad) {
  EXPECT_GE(runnable_tasks(), 1);  // this test, at least
  EXPECT_LE(cpu_pressure(), 100);   // -1 where the kernel has no PSI
  WaitRule rule(1, 7us);
  EXPECT_EQ(rule.now().spin, 7us);
}

TEST(WaitPolicy, PollerStopsPollingOnceItsPhasesAreOver) {
  Poller none(WaitPolicy{});
  EXPECT_FALSE(none.poll_again());
  Poller brief(WaitPolicy{1us, 1us});
  bool stopped = false;
  for (int i = 0; i < 10'000'000 && !stopped; ++i) stopped = !brief.poll_again();
  EXPECT_TRUE(stopped);
  EXPECT_FALSE(brief.poll_again());  // and stays stopped
}

}  // namespace
}  // namespace shardlm::comm
