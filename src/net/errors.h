// The socket failures that callers tell apart (net/socket.h throws them): a
// deadline that passed (the peer is silent or slow) and a peer that closed
// the connection (it is gone). Anything else is a plain Error.
#pragma once

#include "core/error.h"

namespace shardlm::net {

class TimeoutError : public Error {
 public:
  using Error::Error;
};

class PeerClosedError : public Error {
 public:
  using Error::Error;
};

}  // namespace shardlm::net
