// A live peer on a slow link is not a silent one: Channel::recv_live() gives
// up only when no byte moved for the peer timeout, however long the frame.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "cluster/protocol.h"
#include "core/clock.h"

namespace shardlm::cluster {
namespace {

const net::SessionKey kPaceKey{1, 2, 3};

// Writes a Data frame of `bytes` (a multiple of `chunk`) in `chunk`s,
// `pause_ms` apart, then its tag, stopping (the socket left open) after
// `stop_after` bytes.
void trickle(int fd, size_t bytes, size_t chunk, int pause_ms, size_t stop_after) {
  struct {
    uint32_t magic, type;
    uint64_t length;
  } header{0x574d4c53u, uint32_t(MsgType::Data), bytes};  // "SLMW"
  const std::vector<uint8_t> payload(bytes, 'x');
  const net::FrameTag tag = net::FrameAuth(kPaceKey, net::Role::Connector)
                                .seal({{reinterpret_cast<const uint8_t*>(&header), sizeof header}, payload});
  ASSERT_EQ(::write(fd, &header, sizeof header), ssize_t(sizeof header));
  size_t sent = 0;
  for (; sent < bytes && sent < stop_after; sent += chunk) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    ASSERT_EQ(::write(fd, payload.data() + sent, chunk), ssize_t(chunk));
  }
  if (sent == bytes) {
    ASSERT_EQ(::write(fd, tag.data(), tag.size()), ssize_t(tag.size()));
  }
}

struct Link {
  Link() {
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    net::set_nonblocking(fds[0]);
  }
  ~Link() { ::close(fds[1]); }
  int fds[2];
};

TEST(ChannelPace, SlowButMovingFrameIsNotSilence) {
  Link link;
  Channel ch(net::Fd(link.fds[0]), "coordinator test", net::FrameAuth(kPaceKey, net::Role::Acceptor));
  // 512 KiB at 16 KiB every 50 ms: 1.6 s in all, never 0.3 s without a byte.
  std::thread writer(trickle, link.fds[1], size_t(512) << 10, size_t(16) << 10, 50, SIZE_MAX);
  const Message m = ch.recv_live(0.3);
  writer.join();
  EXPECT_EQ(m.type, MsgType::Data);
  EXPECT_EQ(m.payload.size(), size_t(512) << 10);
}

TEST(ChannelPace, SilenceWithinAFrameIsNamedAfterThePeerTimeout) {
  Link link;
  Channel ch(net::Fd(link.fds[0]), "coordinator test", net::FrameAuth(kPaceKey, net::Role::Acceptor));
  std::thread writer(trickle, link.fds[1], size_t(512) << 10, size_t(16) << 10, 20, size_t(64) << 10);
  const auto t0 = SteadyClock::now();
  try {
    ch.recv_live(0.3);
    ADD_FAILURE() << "a frame that stopped halfway was received";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("coordinator test: not responding for 0.3 s"), std::string::npos) << e.what();
  }
  EXPECT_LT(seconds_since(t0), 1.5);
  writer.join();
}

}  // namespace
}  // namespace shardlm::cluster
