#include "cluster/keepalive.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

namespace shardlm::cluster {

void keep_alive(int fd, double peer_timeout_s) {
  const int on = 1;
  const int idle = std::max(1, int(peer_timeout_s / 3));
  const int interval = 1;
  const int probes = std::max(1, int(std::ceil(peer_timeout_s)));
  const unsigned user_timeout_ms = unsigned(std::max(1000.0, peer_timeout_s * 1000));
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof interval);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &probes, sizeof probes);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

namespace {

bool is_connected_tcp(int fd) {
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) return false;
  int value = 0;
  socklen_t len = sizeof value;
  if (::getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &value, &len) != 0 || value != IPPROTO_TCP) return false;
  len = sizeof value;
  if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &value, &len) != 0 || value != 0) return false;
  return true;
}

}  // namespace

int keep_alive_all_connections(double peer_timeout_s) {
  int count = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    if (!is_connected_tcp(fd)) continue;
    keep_alive(fd, peer_timeout_s);
    ++count;
  }
  return count;
}

}  // namespace shardlm::cluster
