#include "cluster/shard_cache.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>

namespace shardlm::cluster {
namespace fs = std::filesystem;

namespace {

struct Entry {
  fs::path path;
  fs::file_time_type used;
  uint64_t bytes;
};

bool is_shard_name(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.size() == 64 + 5 && name.ends_with(".gguf") &&
         name.find_first_not_of("0123456789abcdef") == 64;
}

fs::path seal_of(const fs::path& shard) { return shard.string() + ".seal"; }

// What the seal records of a file; empty when it cannot be read.
std::string seal_text(const fs::path& shard) {
  struct stat st{};
  if (::stat(shard.c_str(), &st) != 0) return {};
  return fmt::format("{} {} {}.{:09}\n", st.st_size, st.st_ino, st.st_ctim.tv_sec, st.st_ctim.tv_nsec);
}

// Most recently used first.
std::vector<Entry> scan(const fs::path& dir) {
  std::vector<Entry> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file(ec) || !is_shard_name(e.path())) continue;
    struct stat st{};
    if (::stat(e.path().c_str(), &st) != 0) continue;
    out.push_back({e.path(), e.last_write_time(ec), uint64_t(st.st_blocks) * 512});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.used > b.used; });
  return out;
}

}  // namespace

bool cached_shard_intact(const fs::path& shard, uint64_t file_size) {
  std::error_code ec;
  if (!fs::is_regular_file(shard, ec) || fs::file_size(shard, ec) != file_size || ec) return false;
  std::ifstream in(seal_of(shard), std::ios::binary);
  const std::string sealed((std::istreambuf_iterator<char>(in)), {});
  return !sealed.empty() && sealed == seal_text(shard);
}

void seal_cached_shard(const fs::path& shard) {
  const std::string text = seal_text(shard);
  const fs::path part = seal_of(shard).string() + ".part";
  {
    std::ofstream out(part, std::ios::binary | std::ios::trunc);
    out << text;
  }
  std::error_code ec;
  fs::rename(part, seal_of(shard), ec);
}

void touch_cached_shard(const fs::path& shard) {
  std::error_code ec;
  fs::last_write_time(shard, fs::file_time_type::clock::now(), ec);
  seal_cached_shard(shard);
}

void evict_cached_shards(const fs::path& dir, uint64_t max_bytes, const fs::path& keep) {
  uint64_t total = 0;
  for (const auto& e : scan(dir)) {
    total += e.bytes;
    if (total <= max_bytes || e.path == keep) continue;
    std::error_code ec;
    if (fs::remove(e.path, ec)) {
      fs::remove(seal_of(e.path), ec);
      spdlog::info("worker: cache over {:.1f} MiB: removed the least recently used shard {}",
                   double(max_bytes) / (1 << 20), e.path.filename().string());
      total -= e.bytes;
    }
  }
}

std::vector<CachedShard> list_cached_shards(const fs::path& dir) {
  std::vector<CachedShard> out;
  for (const auto& e : scan(dir)) out.push_back({e.path.stem().string(), e.bytes});
  return out;
}

}  // namespace shardlm::cluster
