// Metadata readers shared by the per-architecture loaders (model/arch_*.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "model/config.h"

namespace shardlm::gguf { class File; }

namespace shardlm::arch {

// Reads "<arch>.<suffix>" keys and names the file and key in every error.
class ArchKeys {
 public:
  ArchKeys(const gguf::File& f, std::string arch) : f_(f), arch_(std::move(arch)) {}
  const gguf::File& file() const { return f_; }
  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  int64_t require_count(std::string_view suffix) const;
  int64_t count_or(std::string_view suffix, int64_t fallback) const;  // present keys must be in range
  int64_t count_or_zero(std::string_view suffix) const;               // absent or 0: 0
  double real_or(std::string_view suffix, double fallback) const;
  bool flag_or(std::string_view suffix, bool fallback) const;
  [[noreturn]] void fail(std::string_view suffix, const std::string& what) const;  // "<path>: <key> <what>"

 private:
  void check_count(const std::string& k, uint64_t v) const;
  const gguf::File& f_;
  std::string arch_;
};

// What every architecture has: embedding and layer sizes, heads, FFN width,
// RMS epsilon, RoPE (with linear or YaRN scaling), vocabulary, tied output.
void read_transformer(const ArchKeys& keys, ModelConfig& c);

// Expert counts and the FFN width of one expert (feed_forward_length unless
// the file has expert_feed_forward_length). Softmax gating, no shared expert:
// callers change what their architecture does differently.
void read_experts(const ArchKeys& keys, ModelConfig& c);

}  // namespace shardlm::arch
