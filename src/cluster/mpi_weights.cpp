#include "cluster/mpi_weights.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <vector>

#include "cluster/shard.h"
#include "cluster/shard_cache.h"
#include "core/error.h"
#include "model/config.h"

namespace shardlm::cluster {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kKeyTag = 0x57480001, kHaveTag = 0x57480002, kBytesTag = 0x57480003;
constexpr uint64_t kChunkBytes = uint64_t(64) << 20;
constexpr size_t kKeyChars = 64;  // hex SHA-256

// Removes a copy that is not kept once it is mapped (the mapping holds its bytes).
std::unique_ptr<gguf::File> open_copy(const fs::path& path, const SliceStore& store) {
  auto file = gguf::File::open(path.string());
  if (!store.keep) fs::remove(path);
  return file;
}

}  // namespace

SliceStore slice_store(const std::string& cache_dir) {
  SliceStore s;
  s.keep = !cache_dir.empty();
  s.dir = s.keep ? fs::path(cache_dir) : fs::temp_directory_path() / fmt::format("shardlm-mpi-{}", ::getpid());
  std::error_code ec;
  fs::create_directories(s.dir, ec);
  if (ec) throw Error(fmt::format("--cache-dir: cannot create {}: {}", s.dir.string(), ec.message()));
  return s;
}

std::unique_ptr<gguf::File> share_model_header(comm::Communicator& world, const std::string& model_path,
                                               const SliceStore& store) {
  std::unique_ptr<gguf::File> file;
  std::array<uint64_t, 2> size_and_header{};  // {0, 0}: rank 0 could not open it
  std::string error;
  if (world.rank() == 0) {
    try {
      file = gguf::File::open(model_path);
      size_and_header = {file->file_size(), file->data_offset()};
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  world.broadcast(size_and_header.data(), sizeof size_and_header, 0);
  if (size_and_header[0] == 0) {
    if (world.rank() == 0) throw Error(error);
    throw Error("mpi: rank 0 could not open the model (its error says why)");
  }
  std::vector<uint8_t> header(size_and_header[1]);
  if (world.rank() == 0) std::copy_n(file_bytes(*file), header.size(), header.begin());
  world.broadcast(header.data(), header.size(), 0);
  if (world.rank() == 0) return file;
  const fs::path path = store.dir / fmt::format("header-{}-{}.gguf", ::getpid(), world.rank());
  {
    ShardWriter w(path, size_and_header[0]);
    w.write_at(0, header.data(), header.size());
  }
  auto copy = gguf::File::open(path.string());
  fs::remove(path);
  return copy;
}

std::unique_ptr<gguf::File> distribute_slices(comm::Communicator& world, const gguf::File& file,
                                              const parallel::Plan& plan, const SliceStore& store) {
  const ModelConfig c = ModelConfig::from_gguf(file);
  if (world.rank() == 0) {
    for (int r = 1; r < plan.size(); ++r) {
      const auto ranges = shard_ranges(file, c, plan.ranks[size_t(r)]);
      const std::string key = shard_key(file, ranges);
      world.send(r, kKeyTag, key.data(), key.size());
      uint8_t have = 0;
      world.recv(r, kHaveTag, &have, 1);
      if (have) continue;
      spdlog::info("mpi: sending rank {} its slices: {:.1f} MiB", r, double(total_bytes(ranges)) / (1 << 20));
      for (const auto& range : ranges)
        for (uint64_t at = 0; at < range.length; at += kChunkBytes)
          world.send(r, kBytesTag, file_bytes(file) + range.offset + at, std::min(kChunkBytes, range.length - at));
    }
    return nullptr;
  }
  if (world.rank() >= plan.size()) return nullptr;
  std::string key(kKeyChars, '\0');
  if (world.recv(0, kKeyTag, key.data(), key.size()) != kKeyChars ||
      !std::all_of(key.begin(), key.end(), [](char ch) { return std::isxdigit(static_cast<unsigned char>(ch)); }))
    throw Error("mpi: rank 0 sent a malformed slice key");
  const fs::path path = store.dir / (key + ".gguf");
  const uint8_t have = store.keep && cached_shard_intact(path, file.file_size());
  if (store.keep && !have && fs::exists(path))
    spdlog::warn("mpi: rank {}: cached slices {} have changed since they were stored; fetching them again", world.rank(),
                 path.string());
  world.send(0, kHaveTag, &have, 1);
  if (have) {
    spdlog::info("mpi: rank {}: slices {} are cached, nothing sent", world.rank(), path.string());
    touch_cached_shard(path);
    return open_copy(path, store);
  }
  const fs::path part = path.string() + fmt::format(".part{}", ::getpid());
  {
    ShardWriter w(part, file.file_size());
    std::vector<uint8_t> chunk(size_t(std::min<uint64_t>(kChunkBytes, file.file_size())));
    for (const auto& range : shard_ranges(file, c, plan.ranks[size_t(world.rank())]))
      for (uint64_t at = 0; at < range.length; at += kChunkBytes) {
        const uint64_t want = std::min(kChunkBytes, range.length - at);
        if (world.recv(0, kBytesTag, chunk.data(), chunk.size()) != want)
          throw Error(fmt::format("mpi: rank 0 sent a slice chunk of the wrong size at offset {}", range.offset + at));
        w.write_at(range.offset + at, chunk.data(), want);
      }
  }
  fs::rename(part, path);
  if (store.keep) seal_cached_shard(path);
  return open_copy(path, store);
}

}  // namespace shardlm::cluster
