// A worker's --cache-dir: received shards named <sha256>.gguf. Use order is
// the files' modification time (a cache hit touches its file), so the least
// recently used shards go first when the directory exceeds its byte limit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace shardlm::cluster {

struct CachedShard {
  std::string key;     // the hex SHA-256 of the slices
  uint64_t bytes = 0;  // allocated on disk (the shard is sparse)
};

// Marks a shard as just used.
void touch_cached_shard(const std::filesystem::path& shard);
// Removes the least recently used shards until the directory's shards take at
// most `max_bytes`; `keep` (the shard of the running job) is never removed.
void evict_cached_shards(const std::filesystem::path& dir, uint64_t max_bytes, const std::filesystem::path& keep);
// Most recently used first.
std::vector<CachedShard> list_cached_shards(const std::filesystem::path& dir);

}  // namespace shardlm::cluster
