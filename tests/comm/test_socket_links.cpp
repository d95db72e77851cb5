// Socket set-up every link gets (net/socket.cpp).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <string>

#include "core/clock.h"
#include "net/socket.h"

namespace shardlm::net {
namespace {

using namespace std::chrono_literals;

std::string congestion_control(int fd) {
  char name[32] = {};
  socklen_t len = sizeof name - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "?";
  return name;
}

// Same-host links run Reno whatever the system's default (BBR's paced mode
// slows loopback messages of 1-8 MiB), on both ends.
TEST(SocketLinks, LoopbackConnectionsUseReno) {
  const auto deadline = SteadyClock::now() + 2s;
  Fd server = listen_on({"127.0.0.1", 0});
  Fd client = connect_to({"127.0.0.1", local_port(server.get())}, deadline);
  Fd accepted = accept_until(server.get(), deadline);
  ASSERT_TRUE(accepted);
  EXPECT_EQ(congestion_control(client.get()), "reno");
  EXPECT_EQ(congestion_control(accepted.get()), "reno");
}

}  // namespace
}  // namespace shardlm::net
