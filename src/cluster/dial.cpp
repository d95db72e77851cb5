#include "cluster/dial.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace shardlm::cluster {
namespace {

struct AddrList {
  addrinfo* list = nullptr;
  ~AddrList() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const comm::tcp::HostPort& where, AddrList& out, const std::string& who) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(where.port);
  const int rc = getaddrinfo(where.host.c_str(), port.c_str(), &hints, &out.list);
  if (rc != 0) throw Error(fmt::format("{}: cannot resolve '{}': {}", who, where.host, gai_strerror(rc)));
}

}  // namespace

comm::tcp::Fd dial(const std::string& address, double timeout_s, const std::string& who) {
  const auto where = comm::tcp::parse_host_port(address, "--nodes");
  AddrList ai;
  resolve(where, ai, who);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  int last_err = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    comm::tcp::Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) {
      last_err = errno;
      continue;
    }
    int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{fd.get(), POLLOUT, 0};
      if (::poll(&p, 1, int(std::max<int64_t>(left.count(), 0))) <= 0) {
        last_err = ETIMEDOUT;
        continue;
      }
      socklen_t len = sizeof rc;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &rc, &len);
      if (rc != 0) {
        last_err = rc;
        continue;
      }
    } else if (rc != 0) {
      last_err = errno;
      continue;
    }
    comm::tcp::tune_stream(fd.get());
    return fd;
  }
  throw Error(fmt::format("{}: cannot connect: {}", who, std::strerror(last_err)));
}

std::string resolve_address(const std::string& address, const std::string& what) {
  const auto where = comm::tcp::parse_host_port(address, what);
  AddrList ai;
  resolve(where, ai, fmt::format("{}: '{}'", what, address));
  char host[NI_MAXHOST] = "?";
  getnameinfo(ai.list->ai_addr, ai.list->ai_addrlen, host, sizeof host, nullptr, 0, NI_NUMERICHOST);
  return comm::tcp::HostPort{host, where.port}.str();
}

}  // namespace shardlm::cluster
