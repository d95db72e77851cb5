#include "model/arch_registry.h"

#include <array>
#include <utility>

namespace shardlm::arch {
namespace {

const std::array<std::pair<std::string_view, Loader>, 5> kArchitectures = {{
    {"llama", load_llama},
    {"qwen2", load_qwen2},
    {"qwen3", load_qwen3},
    {"qwen3moe", load_qwen3moe},
    {"deepseek2", load_deepseek2},
}};

}  // namespace

Loader find_loader(std::string_view arch) {
  for (const auto& [name, load] : kArchitectures)
    if (name == arch) return load;
  return nullptr;
}

std::string supported_names() {
  std::string s;
  for (const auto& [name, load] : kArchitectures) s += (s.empty() ? "" : ", ") + std::string(name);
  return s;
}

}  // namespace shardlm::arch
