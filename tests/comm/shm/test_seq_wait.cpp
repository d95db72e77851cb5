// wait_for on a sequence word: what a peer published before it left counts.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "comm/shm/seq_wait.h"
#include "core/error.h"

namespace shardlm::comm::shm {
namespace {

using namespace std::chrono_literals;

WaitSpec sleeping_spec(std::function<void()> check) {
  WaitSpec s;
  s.policy = WaitPolicy{};  // no polling: straight to the sleeping loop and its checks
  s.deadline = SteadyClock::now() + 5s;
  s.check = std::move(check);
  s.check_every = 1ms;
  s.describe = [] { return std::string("rank 0 (test)"); };
  return s;
}

TEST(SeqWait, APublishBeforeThePeerLeftIsNotAFailure) {
  SeqWord w{};
  // The peer publishes and leaves between two looks of the waiter: its check
  // sees the leaving, the word already holds the publish.
  const uint32_t got = wait_for(w, 3, sleeping_spec([&] {
                                  publish(w, 3);
                                  throw Error("shm: rank 0 left the cluster");
                                }));
  EXPECT_EQ(got, 3u);
}

TEST(SeqWait, APeerThatLeftWithoutPublishingFailsTheWait) {
  SeqWord w{};
  try {
    wait_for(w, 3, sleeping_spec([&] {
               publish(w, 2);  // an earlier step, not the one awaited
               throw Error("shm: rank 0 left the cluster");
             }));
    FAIL() << "wait_for returned";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "shm: rank 0 left the cluster");
  }
}

}  // namespace
}  // namespace shardlm::comm::shm
