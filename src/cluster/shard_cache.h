// A worker's --cache-dir: received shards named <sha256>.gguf. Use order is
// the files' modification time (a cache hit touches its file), so the least
// recently used shards go first when the directory exceeds its byte limit.
// Each shard has a seal beside it (<sha256>.gguf.seal: its size, inode and
// status-change time when shardlm last wrote or touched it). Any write to the
// file since, or a replacement, changes those, and the shard is fetched
// again: a slice zeroed in place had been used as it was, the output garbage.
// Hashing would also catch decay of the medium, at the price of reading every
// byte of tens of GB at each job's start.
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

// Whether the shard is there, `file_size` bytes long and as shardlm left it (its seal matches).
bool cached_shard_intact(const std::filesystem::path& shard, uint64_t file_size);
// Seals a shard just stored.
void seal_cached_shard(const std::filesystem::path& shard);
// Marks an intact shard as just used (and seals it again: touching changes its status-change time).
void touch_cached_shard(const std::filesystem::path& shard);
// Removes the least recently used shards until the directory's shards take at
// most `max_bytes`; `keep` (the shard of the running job) is never removed.
void evict_cached_shards(const std::filesystem::path& dir, uint64_t max_bytes, const std::filesystem::path& keep);
// Most recently used first.
std::vector<CachedShard> list_cached_shards(const std::filesystem::path& dir);

}  // namespace shardlm::cluster
