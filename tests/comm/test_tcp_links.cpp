// How the TCP backend sets up its links: a link to a rank on this host runs
// Reno congestion control, whatever the system default (net/socket.h,
// use_same_host_congestion_control).
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "comm/tcp/tcp_transport.h"
#include "net/socket.h"

namespace shardlm::comm::tcp {
namespace {

using namespace std::chrono_literals;

std::string congestion_control(int fd) {
  char name[32] = {};
  socklen_t len = sizeof name - 1;
  if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0) return "?";
  return std::string(name);
}

// Both ends of a connection over 127.0.0.1.
struct LoopbackPair {
  net::Fd client, server;
};

LoopbackPair connect_loopback() {
  net::Fd listener = net::listen_on(net::HostPort{"127.0.0.1", 0});
  const net::HostPort where{"127.0.0.1", net::local_port(listener.get())};
  LoopbackPair p;
  p.client = net::connect_to(where, SteadyClock::now() + 5s);
  p.server = net::accept_until(listener.get(), SteadyClock::now() + 5s);
  return p;
}

TEST(TcpLinks, SameHostConnectionGetsReno) {
  LoopbackPair p = connect_loopback();
  ASSERT_TRUE(p.client && p.server);
  ASSERT_TRUE(net::peer_on_this_host(p.client.get()));
  ASSERT_TRUE(net::use_same_host_congestion_control(p.client.get()));
  EXPECT_EQ(congestion_control(p.client.get()), "reno");
}

TEST(TcpLinks, TransportSetsRenoOnSameHostLinks) {
  LoopbackPair p = connect_loopback();
  ASSERT_TRUE(p.client && p.server);
  // The transport owns the socket; a duplicate descriptor reads its options.
  const net::Fd watch(::dup(p.client.get()));
  ASSERT_TRUE(watch);
  net::set_nonblocking(p.client.get());
  std::vector<PeerLink> links(2);
  links[1] = {std::move(p.client), "127.0.0.1"};
  Timeouts to;
  to.op = 500ms;
  TcpTransport t(0, 2, std::move(links), to);
  EXPECT_TRUE(t.shares_host(1));
  EXPECT_EQ(congestion_control(watch.get()), "reno");
}

TEST(TcpLinks, NonTcpLinkIsLeftAlone) {
  // A socket pair is no TCP connection: nothing to set, nothing fails.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  net::Fd a(sv[0]), b(sv[1]);
  EXPECT_FALSE(net::use_same_host_congestion_control(a.get()));
}

}  // namespace
}  // namespace shardlm::comm::tcp
