// The connection a request came on, to notice a client that has left while
// its request waits in the queue or generates a whole (not streamed)
// response: cpp-httplib 0.11 keeps the socket to itself and tells a handler
// only when a write fails, so such a request held its slot, or its place in
// the queue, until it ended.
#pragma once

#include <string>

namespace shardlm::serve {

class ClientSocket {
 public:
  ClientSocket() = default;
  // This process's socket whose ends are local:local_port and
  // remote:remote_port (numeric addresses, as httplib's Request has them);
  // none (gone() is always false) when no descriptor matches.
  static ClientSocket find(const std::string& local, int local_port, const std::string& remote, int remote_port);

  // The client closed its end (or the connection broke). Bytes it sent
  // ahead, such as a pipelined request, do not count.
  bool gone() const;
  bool found() const { return fd_ >= 0; }

 private:
  explicit ClientSocket(int fd) : fd_(fd) {}
  int fd_ = -1;  // not owned: httplib closes it after the response
};

}  // namespace shardlm::serve
