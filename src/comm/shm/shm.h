// The shm backend (POSIX shared memory between ranks of one host): all that the rest of comm sees of it.
#pragma once

#include <memory>

#include "comm/transport.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_shm(const ConnectOptions& options);

}  // namespace shardlm::comm
