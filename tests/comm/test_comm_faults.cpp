// Dead, stalled and hostile peers: every surviving rank fails within its
// timeout with an error naming the culprit; nothing hangs or crashes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include <fmt/format.h>

#include "comm/tcp/tcp.h"
#include "net/frame_auth.h"
#include "net/handshake.h"
#include "net/socket.h"
#include "core/error.h"
#include "rank_harness.h"

namespace shardlm::comm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& s, const std::string& what) {
  return s.find(what) != std::string::npos;
}

TEST(Faults, KillNineMidCollectiveFailsEveryOtherRankNamingIt) {
  testing::RunOptions o;
  o.op_timeout = 2000ms;
  auto out = testing::run_ranks(4, [](Communicator& c) {
    std::vector<float> buf(size_t(4) << 20, 1.f);  // 16 MiB: the ring is in flight
    std::thread killer;
    if (c.rank() == 2)
      killer = std::thread([] {
        std::this_thread::sleep_for(5ms);
        raise(SIGKILL);
      });
    c.all_reduce(buf.data(), buf.size(), DType::F32);
    c.all_reduce(buf.data(), buf.size(), DType::F32);
    if (killer.joinable()) killer.join();
    return std::string("survived");
  }, o);
  EXPECT_EQ(out[2].signal, SIGKILL) << testing::describe(out);
  // A survivor may first see a neighbour that failed because of rank 2 and
  // closed mid-frame (no room left for the abort reason): it must still name
  // a peer. The neighbours of rank 2 in the ring always name rank 2.
  int named_rank2 = 0;
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(out[size_t(r)].exit_code, 1) << testing::describe(out);
    EXPECT_TRUE(contains(out[size_t(r)].output, " (127.0.0.1:")) << testing::describe(out);
    named_rank2 += contains(out[size_t(r)].output, "rank 2 (127.0.0.1:");
    EXPECT_LT(out[size_t(r)].seconds, 15.0) << "a survivor took far longer than the timeout";
  }
  EXPECT_GE(named_rank2, 1) << testing::describe(out);
}

TEST(Faults, StalledRankTimesOutEveryOtherRank) {
  testing::RunOptions o;
  o.op_timeout = 1500ms;
  o.may_hang = {1};
  auto out = testing::run_ranks(3, [](Communicator& c) {
    if (c.rank() == 1) raise(SIGSTOP);
    float x = 1.f;
    c.all_reduce(&x, 1, DType::F32);
    return std::string("survived");
  }, o);
  for (int r : {0, 2}) {
    EXPECT_EQ(out[size_t(r)].exit_code, 1) << testing::describe(out);
    EXPECT_TRUE(contains(out[size_t(r)].output, "rank 1 (127.0.0.1:")) << testing::describe(out);
    EXPECT_LT(out[size_t(r)].seconds, 15.0);
  }
  EXPECT_TRUE(contains(out[0].output + out[2].output, "timed out")) << testing::describe(out);
}

TEST(Faults, LaterCallsFailAtOnceAfterAFailure) {
  testing::RunOptions o;
  o.op_timeout = 2000ms;
  auto out = testing::run_ranks(2, [](Communicator& c) {
    if (c.rank() == 1) raise(SIGKILL);
    float x = 1.f;
    try {
      c.all_reduce(&x, 1, DType::F32);
    } catch (const Error&) {
    }
    auto t0 = std::chrono::steady_clock::now();
    try {
      c.barrier();
    } catch (const Error& e) {
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      RANK_REQUIRE(s < 0.5, "second call took {} s", s);
      throw;
    }
    return std::string("survived");
  }, o);
  EXPECT_EQ(out[0].exit_code, 1) << testing::describe(out);
  EXPECT_TRUE(contains(out[0].output, "rank 1")) << testing::describe(out);
}

TEST(Faults, WrongTokenIsRefusedOnBothEnds) {
  testing::RunOptions o;
  o.connect_timeout = 1500ms;
  o.token = [](int rank) { return std::string(rank == 1 ? "not-the-token" : "test-token"); };
  auto out = testing::run_ranks(2, [](Communicator&) { return std::string("joined"); }, o);
  EXPECT_EQ(out[1].exit_code, 1) << testing::describe(out);
  EXPECT_TRUE(contains(out[1].output, "authentication failed")) << testing::describe(out);
  EXPECT_TRUE(contains(out[1].log, "refused")) << testing::describe(out);
  EXPECT_EQ(out[0].exit_code, 1) << testing::describe(out);
  EXPECT_TRUE(contains(out[0].output, "waiting for ranks 1")) << testing::describe(out);
  EXPECT_TRUE(contains(out[0].log, "authentication failed")) << testing::describe(out);
}

TEST(Faults, GarbageAtTheCoordinatorPortIsDroppedAndTheWorldStillForms) {
  testing::RunOptions o;
  o.before_others = [](uint16_t port) {
    auto deadline = SteadyClock::now() + 2s;
    net::HostPort where{"127.0.0.1", port};
    std::string junk(300, '\x5a');
    {
      net::Fd a = net::connect_to(where, deadline);  // random bytes
      net::write_all(a.get(), junk.data(), junk.size(), deadline, "test");
    }
    {
      net::Fd b = net::connect_to(where, deadline);  // right magic, then truncated
      net::write_all(b.get(), "SHLMCOMM\x01", 9, deadline, "test");
    }
    net::Fd c = net::connect_to(where, deadline);  // connects and hangs up at once
  };
  auto out = testing::run_ranks(3, [](Communicator& c) {
    float x = 2.f;
    c.all_reduce(&x, 1, DType::F32);
    RANK_REQUIRE(x == 6.f, "sum {}", x);
    return std::string("ok");
  }, o);
  for (auto& r : out) EXPECT_TRUE(r.ok()) << testing::describe(out);
  EXPECT_TRUE(contains(out[0].log, "bad magic")) << testing::describe(out);
  // A peer that hangs up is seen as closed (FIN) or, when the coordinator's
  // first bytes reached it unread, as reset (RST): which one is timing.
  EXPECT_TRUE(contains(out[0].log, "connection closed by peer") || contains(out[0].log, "Connection reset by peer"))
      << testing::describe(out);
}

// A fake rank 0 on 127.0.0.2 (an address other than the connecting rank's
// 127.0.0.1: their link is tagged, as between hosts) answers rank 1's
// handshake, then sends the address table under the MAC of the table's bytes,
// with the last of them changed after the MAC was made when `alter`.
// Returns what rank 1's rendezvous said.
std::string join_with_table_from_fake_rank0(bool alter) {
  const auto deadline = SteadyClock::now() + 3s;
  net::Fd listener = net::listen_on({"127.0.0.2", 0});
  const std::string coordinator = fmt::format("127.0.0.2:{}", net::local_port(listener.get()));
  std::string outcome;
  std::thread rank1([&] {
    ConnectOptions o;
    o.rank = 1;
    o.size = 2;
    o.coordinator = coordinator;
    o.token = "tok";
    o.timeouts.connect = 3s;
    try {
      connect_tcp(o);
      outcome = "joined";
    } catch (const Error& e) {
      outcome = e.what();
    }
  });
  try {
    net::Fd c = net::accept_until(listener.get(), deadline);
    const net::HelloInfo peer = net::handshake(
        c.get(), net::Role::Acceptor, {{0, 2, 0}, "tok", "shardlm", net::kProtocolVersion}, deadline, "rank 1");
    // Two entries: rank 0 (no host: the others know it) and rank 1 at 127.0.0.1, port 0.
    std::vector<uint8_t> table = {2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0};
    for (char ch : std::string("127.0.0.1")) table.push_back(uint8_t(ch));
    net::FrameAuth auth(peer.session_key, net::Role::Acceptor);
    const net::FrameTag mac = auth.seal({table});
    if (alter) table.back() = '2';
    table.insert(table.end(), mac.begin(), mac.end());
    net::write_all(c.get(), table.data(), table.size(), deadline, "rank 1");
  } catch (const Error& e) {
    ADD_FAILURE() << "the fake rank 0: " << e.what();  // rank 1 then times out
  }
  rank1.join();
  return outcome;
}

// Between hosts rank 0's address table is the link's first tagged frame: a
// table changed on the way fails the rendezvous naming rank 0.
TEST(Faults, AnAlteredAddressTableFailsTheRendezvous) {
  EXPECT_EQ(join_with_table_from_fake_rank0(false), "joined");
  const std::string error = join_with_table_from_fake_rank0(true);
  EXPECT_TRUE(contains(error, "rank 0 (127.0.0.2:")) << error;
  EXPECT_TRUE(contains(error, "the address table failed its integrity check")) << error;
}

// Runs the handshake between this process and a forked child over a socket pair.
std::pair<std::string, int> handshake_pair(net::HandshakeParams mine, net::HandshakeParams theirs) {
  int sv[2];
  EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::set_nonblocking(sv[0]);
  net::set_nonblocking(sv[1]);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    ::close(sv[0]);
    int code = 0;
    try {
      net::handshake(sv[1], net::Role::Acceptor, theirs, SteadyClock::now() + 3s, "parent");
    } catch (const std::exception&) {
      code = 1;
    }
    _exit(code);
  }
  ::close(sv[1]);
  std::string error;
  try {
    net::handshake(sv[0], net::Role::Connector, mine, SteadyClock::now() + 3s, "child");
  } catch (const Error& e) {
    error = e.what();
  }
  ::close(sv[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return {error, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

TEST(Handshake, MismatchesAreRefusedOnBothEnds) {
  net::HandshakeParams good{{0, 2, 0}, "tok", "cluster", net::kProtocolVersion};
  auto [ok_error, ok_code] = handshake_pair(good, good);
  EXPECT_EQ(ok_error, "");
  EXPECT_EQ(ok_code, 0);

  net::HandshakeParams newer = good;
  newer.version = net::kProtocolVersion + 1;
  auto [v_error, v_code] = handshake_pair(good, newer);
  EXPECT_TRUE(contains(v_error, "protocol version")) << v_error;
  EXPECT_EQ(v_code, 1);

  net::HandshakeParams other_cluster = good;
  other_cluster.cluster_id = "other";
  auto [c_error, c_code] = handshake_pair(good, other_cluster);
  EXPECT_TRUE(contains(c_error, "cluster id")) << c_error;
  EXPECT_EQ(c_code, 1);

  net::HandshakeParams other_token = good;
  other_token.token = "tok2";
  auto [t_error, t_code] = handshake_pair(good, other_token);
  EXPECT_TRUE(contains(t_error, "authentication failed")) << t_error;
  EXPECT_EQ(t_code, 1);
}

}  // namespace
}  // namespace shardlm::comm
