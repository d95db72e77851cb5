// The tcp backend (TCP sockets between hosts or over loopback (the default)): all that the rest of comm sees of it.
#pragma once

#include <memory>

#include "comm/transport.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_tcp(const ConnectOptions& options);

}  // namespace shardlm::comm
