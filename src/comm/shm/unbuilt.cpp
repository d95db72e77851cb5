// Stands in for the shm backend when CMake leaves it out (SHARDLM_WITH_SHM=OFF).
#include "comm/shm/shm.h"

#include "core/error.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_shm(const ConnectOptions&) {
  throw Error("comm backend 'shm' is not built into this binary (configure with -DSHARDLM_WITH_SHM=ON)");
}

}  // namespace shardlm::comm
