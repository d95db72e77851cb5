// Shared-memory segment lifecycle, point-to-point messages over the byte queues,
// and the errors a user can cause.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <numeric>

#include "comm/shm/segment.h"
#include "comm/shm/shm_transport.h"
#include "comm/test_shm_helpers.h"
#include "core/error.h"

namespace shardlm::comm {
namespace {

using testing::run_ranks;
using testing::shm_options;
using testing::shm_world;
using testing::unique_session;

bool shm_entry_exists(const std::string& name) {  // name as given to shm_open
  struct stat st{};
  return stat(("/dev/shm" + name).c_str(), &st) == 0;
}

TEST(ShmSegment, NameDependsOnClusterAndToken) {
  const auto a = shm::segment_name("c", "t");
  EXPECT_EQ(a, shm::segment_name("c", "t"));
  EXPECT_NE(a, shm::segment_name("c", "u"));
  EXPECT_NE(a, shm::segment_name("d", "t"));
  EXPECT_EQ(a.rfind("/shardlm-", 0), 0u);
  EXPECT_EQ(a.size(), std::string("/shardlm-").size() + 32);
}

TEST(ShmSegment, UnlinkedOnceAllRanksAttachedAndPrivate) {
  const std::string session = unique_session("unlink");
  const auto o = shm_options(session, 0, 2);
  const std::string name = shm::segment_name(o.cluster_id + '\n' + o.coordinator, o.token);
  run_ranks(2, [&](int rank) {
    shm::ShmTransport t(shm_options(session, rank, 2));
    if (rank == 0) {  // rank 0 unlinks before returning
      EXPECT_FALSE(shm_entry_exists(name));
    }
  });
  EXPECT_FALSE(shm_entry_exists(name));
}

TEST(ShmSegment, WrongTokenFindsNoSegment) {
  const std::string session = unique_session("token");
  try {
    run_ranks(2, [&](int rank) {
      auto o = shm_options(session, rank, 2);
      o.timeouts.connect = std::chrono::milliseconds(300);
      if (rank == 1) o.token = "other";
      shm::ShmTransport t(o);
    });
    FAIL() << "ranks with different tokens joined";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank"), std::string::npos) << e.what();
  }
}

TEST(ShmSegment, MismatchedLayoutIsRejected) {
  const shm::SegmentConfig c{.cluster_id = unique_session("layout"), .token = std::string(1, 't'), .world = 2,
                             .attach_timeout = std::chrono::milliseconds(500)};
  std::string error;
  run_ranks(2, [&](int rank) {
    shm::SegmentConfig mine = c;
    mine.rank = rank;
    if (rank == 1) mine.queue_bytes = 8192;
    try {
      shm::Segment s(mine);
    } catch (const Error& e) {
      if (rank == 1) error = e.what();
    }
  });
  EXPECT_NE(error.find("expects world 2, slot"), std::string::npos) << error;
}

TEST(ShmSegment, BadRankOrSizeIsAnError) {
  EXPECT_THROW(shm::ShmTransport t(shm_options(unique_session("bad"), 2, 2)), Error);
  EXPECT_THROW(shm::ShmTransport t(shm_options(unique_session("bad"), -1, 2)), Error);
}

TEST(ShmTransport, TaggedMessagesMatchOutOfOrderAndStreamThroughSmallQueues) {
  const std::string session = unique_session("p2p");
  const size_t big = (size_t(1) << 20) + 17;  // four times the queue
  run_ranks(2, [&](int rank) {
    auto comm = shm_world(shm_options(session, rank, 2), CommConfig{});
    const int peer = 1 - rank;
    std::vector<uint8_t> out(big), in(big);
    std::iota(out.begin(), out.end(), uint8_t(rank * 7));
    // Both send a big message at once: works only if a rank waiting for its
    // send also takes in what its peer sends.
    comm->send(peer, 9, out.data(), big);
    comm->recv(peer, 9, in.data(), big);
    std::vector<uint8_t> want(big);
    std::iota(want.begin(), want.end(), uint8_t(peer * 7));
    ASSERT_EQ(in, want);
    // Tag 5 then 6 sent; received 6 first (5 is buffered), then 5; then empty.
    if (rank == 0) {
      int a = 55, b = 66;
      comm->send(1, 5, &a, sizeof a);
      comm->send(1, 6, &b, sizeof b);
      comm->send(1, 7, nullptr, 0);
    } else {
      int a = 0, b = 0;
      EXPECT_EQ(comm->recv(0, 6, &b, sizeof b), sizeof b);
      EXPECT_EQ(comm->recv(0, 5, &a, sizeof a), sizeof a);
      EXPECT_EQ(a, 55);
      EXPECT_EQ(b, 66);
      char c;
      EXPECT_EQ(comm->recv(0, 7, &c, 1), 0u);
    }
    comm->barrier();
  });
}

TEST(ShmTransport, TooLongMessageNamesThePeer) {
  const std::string session = unique_session("toolong");
  run_ranks(2, [&](int rank) {
    auto comm = shm_world(shm_options(session, rank, 2), CommConfig{});
    if (rank == 0) {
      const char msg[32] = {};
      comm->send(1, 3, msg, sizeof msg);
    } else {
      char small[8];
      try {
        comm->recv(0, 3, small, sizeof small);
        ADD_FAILURE() << "a 32-byte message fit in 8 bytes";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("rank 0"), std::string::npos) << e.what();
      }
    }
  });
}

TEST(ShmTransport, MissingPeerTimesOutNamingIt) {
  const std::string session = unique_session("timeout");
  run_ranks(2, [&](int rank) {
    auto o = shm_options(session, rank, 2);
    o.timeouts.op = std::chrono::milliseconds(300);
    auto comm = shm_world(o, CommConfig{});
    if (rank == 1) {  // stays attached but never joins the collective
      std::this_thread::sleep_for(std::chrono::milliseconds(800));
      return;
    }
    float x = 1;
    try {
      comm->all_reduce(&x, 1, DType::F32);
      ADD_FAILURE() << "all_reduce finished without rank 1";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    }
  });
}

}  // namespace
}  // namespace shardlm::comm
