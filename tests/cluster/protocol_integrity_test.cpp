// A control connection's frames after the handshake: each is checked against
// its tag (net/frame_auth.h), so a frame changed, dropped, replayed, reflected
// or spliced in from another connection is refused with the peer named, and
// the handshake gives both ends one session key, a new one each connection.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "cluster/protocol.h"
#include "core/clock.h"
#include "net/handshake.h"

namespace shardlm::cluster {
namespace {

using net::Role;

const net::SessionKey kIntegrityKey{7, 7, 7};

struct Pair {
  Pair() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    net::set_nonblocking(fds[0]);
    net::set_nonblocking(fds[1]);
  }
  int fds[2];
};

// A sender's end whose bytes the test reads raw from `wire`, and a
// receiver's end the test writes them to (`feed`): the man in the middle.
struct Middle {
  Middle(net::FrameAuth sender_auth, net::FrameAuth receiver_auth)
      : sender(net::Fd(out.fds[0]), "worker sender", std::move(sender_auth)),
        receiver(net::Fd(in.fds[0]), "coordinator receiver", std::move(receiver_auth)) {}
  ~Middle() {
    ::close(out.fds[1]);
    ::close(in.fds[1]);
  }
  // The next frame `sender` wrote: header, payload and tag.
  std::vector<uint8_t> take(size_t bytes) {
    std::vector<uint8_t> frame(bytes);
    net::read_all(out.fds[1], frame.data(), bytes, after_seconds(2), "wire");
    return frame;
  }
  void feed(const std::vector<uint8_t>& frame) {
    net::write_all(in.fds[1], frame.data(), frame.size(), after_seconds(2), "wire");
  }
  Pair out, in;
  Channel sender, receiver;
};

constexpr size_t kHeader = 16, kTag = 16;

std::string refusal(Channel& ch) {
  try {
    ch.recv(after_seconds(2));
  } catch (const Error& e) {
    return e.what();
  }
  return "(received)";
}

TEST(ControlFrames, CheckedFramesPassBothWays) {
  Pair link;
  Channel a(net::Fd(link.fds[0]), "worker a", net::FrameAuth(kIntegrityKey, Role::Connector));
  Channel b(net::Fd(link.fds[1]), "coordinator b", net::FrameAuth(kIntegrityKey, Role::Acceptor));
  const std::vector<uint8_t> big(size_t(1) << 20, 0x5a);  // past one write's gathering
  std::thread writer([&] {
    a.send_json(MsgType::Status, {{"status", "ready"}}, after_seconds(5));
    a.send_heartbeat(after_seconds(5));
    a.send(MsgType::Data, big.data(), big.size(), after_seconds(5));
  });
  EXPECT_EQ(b.expect_json(MsgType::Status, after_seconds(5))["status"], "ready");
  const Message data = b.recv_skipping_heartbeats(after_seconds(5));
  writer.join();
  EXPECT_EQ(data.type, MsgType::Data);
  EXPECT_EQ(data.payload, big);
  b.send_json(MsgType::Job, {{"rank", 1}}, after_seconds(5));
  EXPECT_EQ(a.expect_json(MsgType::Job, after_seconds(5))["rank"], 1);
}

TEST(ControlFrames, AChangedByteIsRefused) {
  constexpr size_t kPayload = 18;  // {"status":"ready"}
  for (const size_t at : {size_t(4), kHeader + 3, kHeader + kPayload + 5}) {  // type, payload, tag
    Middle m(net::FrameAuth(kIntegrityKey, Role::Connector), net::FrameAuth(kIntegrityKey, Role::Acceptor));
    m.sender.send_json(MsgType::Status, {{"status", "ready"}}, after_seconds(2));
    std::vector<uint8_t> frame = m.take(kHeader + kPayload + kTag);
    if (at == 4) {
      frame[at] = uint8_t(MsgType::Abort);  // another known type, within its length limit
    } else {
      frame[at] ^= 1;
    }
    m.feed(frame);
    EXPECT_EQ(refusal(m.receiver),
              std::string("coordinator receiver: control frame 1 (") + (at == 4 ? "Abort" : "Status") +
                  ") failed its integrity check: altered, replayed or not from the peer that authenticated")
        << "byte " << at;
  }
}

TEST(ControlFrames, AReplayedOrDroppedFrameIsRefused) {
  {
    Middle m(net::FrameAuth(kIntegrityKey, Role::Connector), net::FrameAuth(kIntegrityKey, Role::Acceptor));
    m.sender.send_heartbeat(after_seconds(2));
    const std::vector<uint8_t> beat = m.take(kHeader + kTag);
    m.feed(beat);
    EXPECT_EQ(m.receiver.recv(after_seconds(2)).type, MsgType::Heartbeat);
    m.feed(beat);
    EXPECT_NE(refusal(m.receiver).find("control frame 2 (Heartbeat) failed its integrity check"), std::string::npos);
  }
  {
    Middle m(net::FrameAuth(kIntegrityKey, Role::Connector), net::FrameAuth(kIntegrityKey, Role::Acceptor));
    m.sender.send_heartbeat(after_seconds(2));
    m.sender.send_heartbeat(after_seconds(2));
    m.take(kHeader + kTag);  // dropped
    m.feed(m.take(kHeader + kTag));
    EXPECT_NE(refusal(m.receiver).find("control frame 1 (Heartbeat) failed"), std::string::npos);
  }
}

TEST(ControlFrames, AReflectedOrForeignFrameIsRefused) {
  // The connector's own frame sent back to a connector: the tag names its sender's role.
  Middle reflected(net::FrameAuth(kIntegrityKey, Role::Connector), net::FrameAuth(kIntegrityKey, Role::Connector));
  reflected.sender.send_heartbeat(after_seconds(2));
  reflected.feed(reflected.take(kHeader + kTag));
  EXPECT_NE(refusal(reflected.receiver).find("failed its integrity check"), std::string::npos);
  // A frame of another connection (another session key).
  net::SessionKey other = kIntegrityKey;
  other[31] ^= 1;
  Middle foreign(net::FrameAuth(other, Role::Connector), net::FrameAuth(kIntegrityKey, Role::Acceptor));
  foreign.sender.send_heartbeat(after_seconds(2));
  foreign.feed(foreign.take(kHeader + kTag));
  EXPECT_NE(refusal(foreign.receiver).find("failed its integrity check"), std::string::npos);
}

TEST(ControlFrames, AHandedOverConnectionCarriesOn) {
  // The worker's daemon answers the first frames, its job process the rest.
  Pair link;
  Channel coordinator(net::Fd(link.fds[0]), "worker", net::FrameAuth(kIntegrityKey, Role::Connector));
  auto daemon = std::make_unique<Channel>(net::Fd(::dup(link.fds[1])), "coordinator",
                                          net::FrameAuth(kIntegrityKey, Role::Acceptor));
  daemon->send_json(MsgType::Info, {{"cores", 2}}, after_seconds(2));
  coordinator.send_json(MsgType::Job, {{"rank", 1}}, after_seconds(2));
  EXPECT_EQ(coordinator.expect_json(MsgType::Info, after_seconds(2))["cores"], 2);
  const net::SessionKey key = daemon->auth().key();
  const uint64_t sent = daemon->auth().sent(), received = daemon->auth().received();
  daemon.reset();
  Channel job(net::Fd(link.fds[1]), "coordinator", net::FrameAuth(key, Role::Acceptor, sent, received));
  EXPECT_EQ(job.expect_json(MsgType::Job, after_seconds(2))["rank"], 1);
  job.send_json(MsgType::Status, {{"status", "ready"}}, after_seconds(2));
  EXPECT_EQ(coordinator.expect_json(MsgType::Status, after_seconds(2))["status"], "ready");
}

TEST(ControlFrames, AnUnsentFrameGivesItsNumberToTheNext) {
  // A sender that tagged a frame, then sent something else in its place
  // (tcp_transport's last words): the receiver sees no gap.
  net::FrameAuth sender(kIntegrityKey, Role::Connector), receiver(kIntegrityKey, Role::Acceptor);
  const uint8_t first[] = {1}, words[] = {2}, next[] = {3};
  sender.seal({first});
  sender.unseal_last();
  const net::FrameTag last_words = sender.seal({words});
  EXPECT_TRUE(receiver.verify({words}, last_words));
  const net::FrameTag after = sender.seal({next});
  EXPECT_TRUE(receiver.verify({next}, after));
  EXPECT_EQ(receiver.received(), 2u);
}

TEST(ControlFrames, TheHandshakeAgreesOnAFreshSessionKey) {
  const auto keys = [] {
    Pair link;
    net::HandshakeParams params;
    params.token = "secret";
    params.cluster_id = kClusterId;
    net::SessionKey accepted{};
    std::thread acceptor([&] {
      accepted = net::handshake(link.fds[1], Role::Acceptor, params, after_seconds(5), "connector").session_key;
    });
    const net::SessionKey connected =
        net::handshake(link.fds[0], Role::Connector, params, after_seconds(5), "acceptor").session_key;
    acceptor.join();
    ::close(link.fds[0]);
    ::close(link.fds[1]);
    return std::pair{connected, accepted};
  };
  const auto [first_c, first_a] = keys();
  const auto [second_c, second_a] = keys();
  EXPECT_EQ(first_c, first_a);
  EXPECT_EQ(second_c, second_a);
  EXPECT_NE(first_c, second_c);
  EXPECT_NE(first_c, net::SessionKey{});
}

}  // namespace
}  // namespace shardlm::cluster
