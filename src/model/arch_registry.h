// The architectures this engine runs, by GGUF general.architecture. Each has
// one loader (model/arch_<name>.cpp) that reads its metadata into a
// ModelConfig; adding an architecture adds a file and a line in the table.
#pragma once

#include <string>
#include <string_view>

#include "model/arch_common.h"

namespace shardlm::arch {

using Loader = void (*)(const ArchKeys& keys, ModelConfig& c);

void load_llama(const ArchKeys& keys, ModelConfig& c);  // also Mixtral (llama with experts)
void load_qwen2(const ArchKeys& keys, ModelConfig& c);
void load_qwen3(const ArchKeys& keys, ModelConfig& c);
void load_qwen3moe(const ArchKeys& keys, ModelConfig& c);
void load_deepseek2(const ArchKeys& keys, ModelConfig& c);  // DeepSeek-V2/V3/R1, Kimi-K2

Loader find_loader(std::string_view arch);  // null: unsupported
std::string supported_names();              // "llama, qwen2, ..."

}  // namespace shardlm::arch
