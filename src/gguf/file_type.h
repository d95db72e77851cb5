// `general.file_type`: the ggml/llama.cpp number naming a file's dominant
// weight type (a fact of the format, not of this engine).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/dtype.h"

namespace shardlm::gguf {

// "MOSTLY_Q4_0", "MOSTLY_Q4_K_M", ...; "unknown (N)" for numbers not listed.
std::string file_type_name(uint32_t file_type);
// The file_type a file whose matrices are all of `type` carries (K-quants map
// to their _M mix), or nullopt when ggml defines none.
std::optional<uint32_t> file_type_for(DType type);

}  // namespace shardlm::gguf
