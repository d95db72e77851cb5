// Reaching a worker: one connection attempt per resolved address (a refused
// port is reported at once, as refused), and the numeric address a node name
// resolves to, so that two names for one worker are caught before connecting.
#pragma once

#include <memory>
#include <string>

#include "cluster/protocol.h"
#include "net/socket.h"

namespace shardlm::cluster {

// "worker host:port" errors name `who`.
net::Fd dial(const std::string& address, double timeout_s, const std::string& who);
// An authenticated control connection to the worker at `address` ("host:port"),
// named "worker host:port" in its errors. Connecting and the handshake each
// take at most timeout_s (the peer timeout): a frozen worker is named then.
std::unique_ptr<Channel> open_worker_channel(const std::string& address, const std::string& token, double timeout_s);
// "ip:port" of the first address `address` ("host:port") resolves to.
std::string resolve_address(const std::string& address, const std::string& what);

}  // namespace shardlm::cluster
