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

// Writes a Data frame of `bytes` in `chunk`s, `pause_ms` apart, stopping
// (the socket left open) after `stop_after` bytes.
void trickle(int fd, size_t bytes, size_t chunk, int pause_ms, size_t stop_after) {
  struct {
    uint32_t magic, type;
    uint64_t length;
  } header{0x574d4c53u, uint32_t(MsgType::Data), bytes};  // "SLMW"
  ASSERT_EQ(::write(fd, &header, sizeof header), ssize_t(sizeof header));
  const std::vector<char> data(chunk, 'x');
  for (size_t sent = 0; sent < bytes && sent < stop_after; sent += chunk) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    ASSERT_EQ(::write(fd, data.data(), chunk), ssize_t(chunk));
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
  Channel ch(net::Fd(link.fds[0]), "coordinator test");
  // 512 KiB at 16 KiB every 50 ms: 1.6 s in all, never 0.3 s without a byte.
  std::thread writer(trickle, link.fds[1], size_t(512) << 10, size_t(16) << 10, 50, SIZE_MAX);
  const Message m = ch.recv_live(0.3);
  writer.join();
  EXPECT_EQ(m.type, MsgType::Data);
  EXPECT_EQ(m.payload.size(), size_t(512) << 10);
}

TEST(ChannelPace, SilenceWithinAFrameIsNamedAfterThePeerTimeout) {
  Link link;
  Channel ch(net::Fd(link.fds[0]), "coordinator test");
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
