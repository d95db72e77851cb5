// The connection a request came on, to notice a client that has left while
// its request waits in the queue or generates a whole (not streamed)
// response: cpp-httplib 0.11 keeps the socket to itself and tells a handler
// only when a write fails, so such a request held its slot, or its place in
// the queue, until it ended.
#pragma once

#include <string>
#include <utility>

namespace shardlm::serve {

class ClientSocket {
 public:
  ClientSocket() = default;
  // The socket whose ends are local:local_port and remote:remote_port
  // (numeric addresses, as httplib's Request has them). It is looked for
  // among this process's descriptors at the first look, not here: a request
  // answered within its first wait never pays for the search.
  ClientSocket(std::string local, int local_port, std::string remote, int remote_port)
      : local_(std::move(local)), remote_(std::move(remote)), local_port_(local_port), remote_port_(remote_port) {}

  // The client closed its end (or the connection broke). Bytes it sent
  // ahead, such as a pipelined request, do not count. Always false when no
  // descriptor matches.
  bool gone();
  bool found();
  // Ends the connection both ways. httplib 0.11 keeps a connection open
  // after a response that says "Connection: close" when the request did not,
  // and would read a refused request's unread body as the next request.
  void shut_down();

 private:
  std::string local_, remote_;
  int local_port_ = 0, remote_port_ = 0;
  bool searched_ = false;
  int fd_ = -1;  // not owned: httplib closes it after the response
};

}  // namespace shardlm::serve
