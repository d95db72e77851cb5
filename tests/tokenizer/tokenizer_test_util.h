// Shared helpers for the tokenizer tests: where the shared models live and a
// cached tokenizer per vocabulary file (each file is loaded once per run).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "test_paths.h"

namespace shardlm::test {

inline std::filesystem::path shared_models() { return shardlm::test_paths::models_dir(); }

inline std::string read_text_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// nullptr when the file is missing (the caller skips).
inline const Tokenizer* tokenizer_for(const std::filesystem::path& model) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto it = cache.find(model.string());
  if (it != cache.end()) return it->second.get();
  if (!std::filesystem::exists(model)) return nullptr;
  auto file = gguf::File::open(model.string());
  auto tok = Tokenizer::from_gguf(*file);
  return cache.emplace(model.string(), std::move(tok)).first->second.get();
}

inline std::string to_hex(std::string_view bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    out += digits[uint8_t(c) >> 4];
    out += digits[uint8_t(c) & 15];
  }
  return out;
}

}  // namespace shardlm::test
