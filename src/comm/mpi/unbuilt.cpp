// Stands in for the mpi backend when CMake leaves it out (SHARDLM_WITH_MPI=OFF, or no MPI found).
#include "comm/mpi/mpi.h"

#include "core/error.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_mpi(const ConnectOptions&) {
  throw Error("comm backend 'mpi' is not built into this binary (configure with -DSHARDLM_WITH_MPI=ON and an MPI installed)");
}

}  // namespace shardlm::comm
