// Settings read from the environment (tuning knobs and test hooks).
#pragma once

#include <cstddef>

namespace shardlm {

// $name as a byte count (decimal digits), `fallback` when unset or empty.
// Throws Error "NAME='value' is not a byte count" for anything else.
size_t env_bytes(const char* name, size_t fallback);

}  // namespace shardlm
