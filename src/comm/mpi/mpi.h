// The mpi backend (MPI messages and MPI_Allreduce, ranks from mpirun): all that the rest of comm sees of it.
#pragma once

#include <memory>

#include "comm/transport.h"

namespace shardlm::comm {

std::unique_ptr<Transport> connect_mpi(const ConnectOptions& options);

}  // namespace shardlm::comm
