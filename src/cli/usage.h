// Usage errors (a flag's value, a missing or conflicting flag) exit with 2,
// runtime errors with 1, both as one `shardlm: error: ...` line (main.cpp).
// The validators below give every numeric flag the same kind of message:
// "--top-p: 2 is not in [0, 1]".
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "core/kv_type.h"
#include "core/error.h"

namespace shardlm::cli {

class UsageError : public Error {
 public:
  using Error::Error;
};

// A finite number in [lo, hi] (NaN and infinities are refused).
CLI::Validator finite_in(double lo, double hi);
// An integer in [lo, hi].
CLI::Validator integer_in(long long lo, long long hi);

// --kv-type f32|f16 (default f32), the same on every subcommand.
CLI::Option* add_kv_type_option(CLI::App& cmd, std::string& into);
// --mmap: into = true keeps the weights in the file's mapping
// (ModelOptions::weights_in_memory false).
CLI::Option* add_mmap_flag(CLI::App& cmd, bool& into);
// The DType of a --kv-type value; UsageError naming the flag for anything but f32/f16.
DType kv_type_of(const std::string& name);

}  // namespace shardlm::cli
