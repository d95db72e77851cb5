#include "serve/client_socket.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace shardlm::serve {
namespace {

int port_of(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// A loopback connection: the client's end and the server's (accepted) end.
struct Connection {
  int client = -1, server = -1;
  Connection() {
    const int listener = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listener, 1), 0);
    socklen_t len = sizeof a;
    getsockname(listener, reinterpret_cast<sockaddr*>(&a), &len);
    client = socket(AF_INET, SOCK_STREAM, 0);
    EXPECT_EQ(connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    server = accept(listener, nullptr, nullptr);
    close(listener);
  }
  ~Connection() {
    if (client >= 0) close(client);
    close(server);
  }
  ClientSocket find() const { return ClientSocket("127.0.0.1", port_of(server, false), "127.0.0.1", port_of(server, true)); }
};

TEST(ClientSocket, FindsTheConnectionByItsEnds) {
  Connection c;
  EXPECT_TRUE(c.find().found());
  EXPECT_FALSE(ClientSocket("127.0.0.1", port_of(c.server, false), "127.0.0.1", 1).found());
  EXPECT_FALSE(ClientSocket("127.0.0.2", port_of(c.server, false), "127.0.0.1", port_of(c.server, true)).found());
  EXPECT_FALSE(ClientSocket().gone());
}

TEST(ClientSocket, GoneOnlyOnceTheClientHasClosed) {
  Connection c;
  ClientSocket s = c.find();
  EXPECT_FALSE(s.gone());
  ASSERT_EQ(write(c.client, "GET", 3), 3);  // a pipelined request is not a goodbye
  EXPECT_FALSE(s.gone());
  close(c.client);
  c.client = -1;
  EXPECT_TRUE(s.gone());
}

TEST(ClientSocket, AHalfCloseIsAGoodbye) {
  Connection c;
  ClientSocket s = c.find();
  shutdown(c.client, SHUT_WR);
  EXPECT_TRUE(s.gone());
}

}  // namespace
}  // namespace shardlm::serve
