// A worker's "shard" is a sparse copy of the model file: the same size and
// byte layout (so gguf::File and ModelWeights::map load it unchanged), with
// only the header and the bytes of this rank's slices written; everything
// else is a hole that reads as zeros and takes no disk or memory. Only the
// byte ranges below travel over the wire.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/plan.h"

namespace shardlm::gguf { class File; }

namespace shardlm::cluster {

struct ByteRange {
  uint64_t offset = 0;  // in the file
  uint64_t length = 0;
};

// The header and every byte rank `plan` reads (ModelWeights::map), sorted and merged.
std::vector<ByteRange> shard_ranges(const gguf::File& file, const ModelConfig& c, const RankPlan& plan);
// The start of the file's mapping (gguf::File maps it whole).
const uint8_t* file_bytes(const gguf::File& file);
uint64_t total_bytes(const std::vector<ByteRange>& ranges);

// SHA-256 (hex) of the file size, the ranges and their bytes: the cache key.
std::string shard_key(const gguf::File& file, const std::vector<ByteRange>& ranges);
// SHA-256 (hex) of the file size, its header and metadata, and 1024 pieces
// of 4 KiB spread evenly over its tensor data and its last 4 KiB (all of it
// up to 16 MiB of tensor data): what tells a worker's own copy
// (--worker-model) from the coordinator's when it is another model of the
// same size (a fine-tune, another quantization mix) or a damaged one (a
// download cut short and zero-filled, a region overwritten: caught when it
// spans a 1024th of the data), reading ~4 MB instead of all of it.
std::string model_fingerprint(const gguf::File& file);

// A shard being received: a sparse file of the model's size, written at the
// offsets the bytes have in the model.
class ShardWriter {
 public:
  ShardWriter(std::filesystem::path path, uint64_t file_size);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void write_at(uint64_t offset, const uint8_t* data, uint64_t length);
  // A payload of records (u64 offset, u64 length, bytes), as workers receive
  // them; `who` sent it and is named when a record is malformed.
  void write_records(const std::vector<uint8_t>& payload, const std::string& who);
  uint64_t received() const { return received_; }
  void close();

 private:
  std::filesystem::path path_;
  uint64_t size_;
  int fd_ = -1;
  uint64_t received_ = 0;
};

}  // namespace shardlm::cluster
