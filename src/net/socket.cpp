#include "net/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "core/error.h"
#include "net/errors.h"

namespace shardlm::net {

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = std::exchange(o.fd_, -1);
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

std::string errno_text(int err) { return std::strerror(err); }

std::string HostPort::str() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

HostPort parse_host_port(const std::string& text, const std::string& what) {
  HostPort hp;
  std::string port_text;
  if (!text.empty() && text[0] == '[') {
    auto close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() || text[close + 1] != ':')
      throw Error(fmt::format("{}: '{}' is not host:port", what, text));
    hp.host = text.substr(1, close - 1);
    port_text = text.substr(close + 2);
  } else {
    auto colon = text.rfind(':');
    if (colon == std::string::npos || colon == 0)
      throw Error(fmt::format("{}: '{}' is not host:port", what, text));
    hp.host = text.substr(0, colon);
    port_text = text.substr(colon + 1);
  }
  if (port_text.empty() || port_text.size() > 5 ||
      port_text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(port_text) > 65535)
    throw Error(fmt::format("{}: bad port in '{}'", what, text));
  hp.port = uint16_t(std::stoul(port_text));
  return hp;
}

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

void resolve(const HostPort& where, bool passive, AddrInfo& out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  std::string port = std::to_string(where.port);
  int rc = getaddrinfo(where.host.empty() ? nullptr : where.host.c_str(), port.c_str(), &hints,
                       &out.list);
  if (rc != 0) throw Error(fmt::format("cannot resolve {}: {}", where.str(), gai_strerror(rc)));
}

std::string sockaddr_text(const sockaddr_storage& ss, bool with_port) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (ss.ss_family == AF_INET) {
    auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
    port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
    port = ntohs(a->sin6_port);
  }
  if (!with_port) return host;
  return HostPort{host, port}.str();
}

// Waits for `events` on fd until the deadline; false on timeout.
bool wait_fd(int fd, short events, Deadline deadline) {
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - SteadyClock::now());
    if (left.count() < 0) return false;
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, int(std::min<int64_t>(left.count() + 1, 1000)));
    if (rc > 0) return true;
    if (rc < 0 && errno != EINTR) return true;  // let the caller's syscall report it
  }
}

}  // namespace

void set_nonblocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
    throw Error(fmt::format("fcntl(O_NONBLOCK): {}", errno_text(errno)));
}

void tune_stream(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// A loopback peer, or one at this socket's own address.
static bool same_host(int fd) {
  sockaddr_storage here{}, there{};
  socklen_t here_len = sizeof here, there_len = sizeof there;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&here), &here_len) != 0 ||
      getpeername(fd, reinterpret_cast<sockaddr*>(&there), &there_len) != 0 || here.ss_family != there.ss_family)
    return false;
  if (there.ss_family == AF_INET) {
    const in_addr a = reinterpret_cast<const sockaddr_in&>(here).sin_addr;
    const in_addr b = reinterpret_cast<const sockaddr_in&>(there).sin_addr;
    return a.s_addr == b.s_addr || (ntohl(b.s_addr) >> 24) == 127;
  }
  if (there.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6&>(here).sin6_addr;
    const in6_addr& b = reinterpret_cast<const sockaddr_in6&>(there).sin6_addr;
    return std::memcmp(&a, &b, sizeof a) == 0 || IN6_IS_ADDR_LOOPBACK(&b);
  }
  return false;
}

// Same-host links use Reno whatever the system's default congestion
// control: under BBR (this VM's default) a loopback connection falls into a
// paced mode that took 2-4 MiB all-reduces to a third of Reno's speed on an
// idle host and to a fifth under load (docs/BENCHMARKS.md, #15), and there is
// no network whose bandwidth to probe. Reno is the one every unprivileged
// process may pick (net.ipv4.tcp_allowed_congestion_control); links between
// hosts keep the system's choice.
static void use_reno_if_same_host(int fd) {
  static constexpr char kReno[] = "reno";
  if (same_host(fd)) setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, kReno, socklen_t(sizeof kReno - 1));
}

// Deep buffers let a whole ring piece sit in the kernel while the receiver is
// descheduled (2 vCPUs, many processes). Only before listen()/connect(): the
// window the SYN announces and its growth follow the receive buffer then. A
// receive buffer fixed on a connected socket leaves its advertised window
// where the handshake put it (~126 KiB on loopback: `ss -tmi` shows
// rcv_ssthresh:129024, the peer rwnd_limited), so every larger message
// waits for window updates, i.e. for the receiver to be scheduled, several
// times. The kernel caps the size at rmem_max/wmem_max.
static void size_buffers_before_connecting(int fd) {
  int bytes = 4 << 20;
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
}

Fd listen_on(const HostPort& where, int backlog) {
  AddrInfo ai;
  resolve(where, true, ai);
  int last_err = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd) {
      last_err = errno;
      continue;
    }
    int one = 1;
    setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    size_buffers_before_connecting(fd.get());  // accepted sockets inherit them
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd.get(), backlog) == 0) {
      set_nonblocking(fd.get());
      return fd;
    }
    last_err = errno;
  }
  throw Error(fmt::format("cannot listen on {}: {}", where.str(), errno_text(last_err)));
}

uint16_t local_port(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return 0;
  if (ss.ss_family == AF_INET) return ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  if (ss.ss_family == AF_INET6) return ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return 0;
}

std::string peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddr_text(ss, true);
}

std::string local_ip(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "?";
  return sockaddr_text(ss, false);
}

bool peer_on_this_host(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  return sockaddr_text(ss, false) == local_ip(fd);
}

std::string resolve_numeric(const HostPort& where) {
  AddrInfo ai;
  resolve(where, false, ai);
  sockaddr_storage ss{};
  std::memcpy(&ss, ai.list->ai_addr, std::min<size_t>(ai.list->ai_addrlen, sizeof ss));
  return HostPort{sockaddr_text(ss, false), where.port}.str();
}

Fd try_connect_once(const HostPort& where, Deadline deadline, int* err) {
  AddrInfo ai;
  resolve(where, false, ai);
  *err = 0;
  for (addrinfo* a = ai.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (!fd) {
      *err = errno;
      continue;
    }
    size_buffers_before_connecting(fd.get());
    tune_stream(fd.get());
    int rc = ::connect(fd.get(), a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      if (!wait_fd(fd.get(), POLLOUT, deadline)) {
        *err = ETIMEDOUT;
        continue;
      }
      socklen_t len = sizeof rc;
      getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &rc, &len);
      if (rc != 0) {
        *err = rc;
        continue;
      }
    } else if (rc != 0) {
      *err = errno;
      continue;
    }
    use_reno_if_same_host(fd.get());
    return fd;
  }
  return Fd();
}

Fd connect_to(const HostPort& where, Deadline deadline) {
  for (;;) {
    int err = 0;
    if (Fd fd = try_connect_once(where, deadline, &err)) return fd;
    if (SteadyClock::now() >= deadline)
      throw Error(fmt::format("cannot connect to {}: {}", where.str(), errno_text(err)));
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Fd accept_until(int listen_fd, Deadline deadline) {
  for (;;) {
    int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      tune_stream(fd);
      use_reno_if_same_host(fd);
      return Fd(fd);
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
      throw Error(fmt::format("accept on port {}: {}", local_port(listen_fd), errno_text(errno)));
    if (!wait_fd(listen_fd, POLLIN, deadline)) return Fd();
  }
}

void write_all(int fd, const void* data, size_t n, Deadline deadline, const std::string& who, double silence_s) {
  auto* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w > 0) {
      p += w;
      n -= size_t(w);
      if (silence_s > 0) deadline = after_seconds(silence_s);
    } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      if (!wait_fd(fd, POLLOUT, deadline)) throw TimeoutError(fmt::format("{}: send timed out", who));
    } else {
      throw Error(fmt::format("{}: send failed: {}", who, errno_text(errno)));
    }
  }
}

void read_all(int fd, void* data, size_t n, Deadline deadline, const std::string& who, double silence_s) {
  auto* p = static_cast<char*>(data);
  size_t want = n;
  while (n > 0) {
    ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= size_t(r);
      if (silence_s > 0) deadline = after_seconds(silence_s);
    } else if (r == 0) {
      throw PeerClosedError(fmt::format("{}: connection closed by peer (after {} of {} bytes)", who,
                              want - n, want));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
      if (!wait_fd(fd, POLLIN, deadline))
        throw TimeoutError(fmt::format("{}: timed out waiting for data ({} of {} bytes)", who, want - n,
                                want));
    } else {
      throw Error(fmt::format("{}: receive failed: {}", who, errno_text(errno)));
    }
  }
}

}  // namespace shardlm::net
