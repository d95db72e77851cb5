// --distribute-weights under an MPI launch: only rank 0 reads the model. The
// other ranks first get its header (metadata and tensor table: enough to
// describe themselves and plan), then, once the plan is known, exactly the
// bytes of their slices, written into a sparse copy of the file
// (cluster/shard.h) that the loader maps as if it were the model. With a
// cache directory the copy is kept under the SHA-256 of its slices, as
// workers keep theirs, and the next launch with the same layout sends nothing.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "gguf/gguf.h"
#include "parallel/planner.h"

namespace shardlm::cluster {

struct SliceStore {
  std::filesystem::path dir;  // where the copies are written
  bool keep = false;          // a cache: keep them (else removed once mapped)
};
// `cache_dir`, or a fresh temporary directory when empty.
SliceStore slice_store(const std::string& cache_dir);

// Collective over `world`. Rank 0 opens `model_path`; every other rank
// returns a copy holding only the header.
std::unique_ptr<gguf::File> share_model_header(comm::Communicator& world, const std::string& model_path,
                                               const SliceStore& store);

// Collective over `world`, after every rank made the same `plan` from `file`.
// The ranks of the plan other than 0 return their slices' file (received, or
// from the cache); rank 0 and ranks outside the plan return nullptr.
std::unique_ptr<gguf::File> distribute_slices(comm::Communicator& world, const gguf::File& file,
                                              const parallel::Plan& plan, const SliceStore& store);

}  // namespace shardlm::cluster
