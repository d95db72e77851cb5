// POSIX socket helpers shared by the comm tcp backend and the cluster's
// control connections: an owning fd, host:port parsing, listen/connect, and
// whole-buffer reads and writes that honour a deadline. Everything that fails
// throws Error naming `who` (peer or address).
#pragma once

#include <sys/socket.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "core/clock.h"

namespace shardlm::net {

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset();
  explicit operator bool() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct HostPort {
  std::string host;
  uint16_t port = 0;
  std::string str() const;
};
// "host:port", "[v6addr]:port"; throws Error naming `what` on bad input.
HostPort parse_host_port(const std::string& text, const std::string& what);

// Bound and listening on host:port (port 0 = OS choice).
Fd listen_on(const HostPort& where, int backlog = 64);
uint16_t local_port(int fd);
std::string peer_address(int fd);   // "ip:port" of the other end
std::string local_ip(int fd);       // our side's IP of a connected socket
// Both ends of a connected socket have the same IP (loopback included): the
// peer runs on this host (or in this network namespace).
bool peer_on_this_host(int fd);

// "ip:port" of the first address host:port resolves to; throws Error when
// it does not resolve.
std::string resolve_numeric(const HostPort& where);
// One attempt at each address `where` resolves to (each may wait for the
// handshake until the deadline); an empty Fd with *err = the last errno when
// none connected. Throws Error when the name does not resolve.
Fd try_connect_once(const HostPort& where, Deadline deadline, int* err);
// try_connect_once again and again until the deadline (the listener may not
// be up yet).
Fd connect_to(const HostPort& where, Deadline deadline);
// Accepts one connection or returns an empty Fd when the deadline passes.
Fd accept_until(int listen_fd, Deadline deadline);

void set_nonblocking(int fd);
void tune_stream(int fd);  // TCP_NODELAY

// Blocking-with-deadline transfers on a non-blocking socket. With
// silence_s > 0 the deadline moves to silence_s after every call that moved
// bytes: a slow link that keeps moving is not a silent peer.
void write_all(int fd, const void* data, size_t n, Deadline deadline, const std::string& who, double silence_s = 0);
void read_all(int fd, void* data, size_t n, Deadline deadline, const std::string& who, double silence_s = 0);

std::string errno_text(int err);

}  // namespace shardlm::net
