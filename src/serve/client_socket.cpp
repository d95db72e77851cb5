#include "serve/client_socket.h"

#include <dirent.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>

namespace shardlm::serve {
namespace {

// The numeric address and port of one end of a socket, the way httplib
// formats them; false when fd is not a connected internet socket.
bool end_of(int fd, bool peer, std::string& address, int& port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  auto* sa = reinterpret_cast<sockaddr*>(&addr);
  if ((peer ? getpeername(fd, sa, &len) : getsockname(fd, sa, &len)) != 0) return false;
  if (addr.ss_family != AF_INET && addr.ss_family != AF_INET6) return false;
  char host[NI_MAXHOST], service[NI_MAXSERV];
  if (getnameinfo(sa, len, host, sizeof host, service, sizeof service, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  address = host;
  port = std::atoi(service);
  return true;
}

}  // namespace

bool ClientSocket::found() {
  if (searched_) return fd_ >= 0;
  searched_ = true;
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return false;
  std::string address;
  int port = 0;
  while (const dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(dir)) continue;
    if (!end_of(int(fd), true, address, port) || port != remote_port_ || address != remote_) continue;
    if (!end_of(int(fd), false, address, port) || port != local_port_ || address != local_) continue;
    fd_ = int(fd);
    break;
  }
  closedir(dir);
  return fd_ >= 0;
}

bool ClientSocket::gone() {
  if (!found()) return false;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLHUP | POLLERR | POLLNVAL | POLLRDHUP)) return true;
  char c;
  return (p.revents & POLLIN) && recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void ClientSocket::shut_down() {
  if (found()) shutdown(fd_, SHUT_RDWR);
}

}  // namespace shardlm::serve
