// Shared by the chat template tests: reading the bundled templates and
// golden renderings (tests/chat/data, see its README).
#pragma once

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.h"
#include "test_paths.h"

namespace shardlm::chat::testing {

inline std::string read_data_file(const std::string& name) {
  std::string text = shardlm::test_paths::chat_data(name);
  if (text.empty()) throw std::runtime_error(std::string("cannot read ") + shardlm::test_paths::chat_data_dir() + "/" + name);
  return text;
}

inline nlohmann::ordered_json read_data_json(const std::string& name) {
  return nlohmann::ordered_json::parse(read_data_file(name));
}

// The date render.py fixes strftime_now() to.
inline RenderOptions golden_options() { return RenderOptions{calendar_date(2026, 7, 26)}; }

}  // namespace shardlm::chat::testing
