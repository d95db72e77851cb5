#include <array>

#include "cli/synth.h"
#include "core/error.h"

namespace shardlm::cli::synth {
namespace {

// Shapes of the real models (their config.json), so that memory, speed and
// partitioning behave as they would with the real weights.
const std::array<Preset, 4> kPresets = {{
    {"tiny", "llama", 2, 256, 768, 8, 2, 32, 512, 2048, false, false, 10000.0, 1e-5f, "llama-bpe", true},
    {"llama3.2-1b", "llama", 16, 2048, 8192, 32, 8, 64, 128256, 131072, true, false, 500000.0, 1e-5f, "llama-bpe",
     true},
    {"llama3.1-8b", "llama", 32, 4096, 14336, 32, 8, 128, 128256, 131072, false, false, 500000.0, 1e-5f,
     "llama-bpe", true},
    {"qwen3-0.6b", "qwen3", 28, 1024, 3072, 16, 8, 128, 151936, 40960, true, true, 1000000.0, 1e-6f, "qwen2",
     false},
}};

}  // namespace

std::string preset_names() {
  std::string s;
  for (const auto& p : kPresets) s += (s.empty() ? "" : ", ") + p.name;
  return s;
}

const Preset& find_preset(const std::string& name) {
  for (const auto& p : kPresets)
    if (p.name == name) return p;
  throw Error("synth: --preset '" + name + "' is unknown (known: " + preset_names() + ")");
}

}  // namespace shardlm::cli::synth
