// The types a KV cache is kept in, by name: one parser for the CLI's
// --kv-type and the workers' Job message.
#pragma once

#include <optional>
#include <string_view>

#include "core/dtype.h"

namespace shardlm {

// "f32" or "f16" (case-insensitive), else nullopt.
std::optional<DType> kv_type_from_name(std::string_view name);

}  // namespace shardlm
