#include "model/session.h"

#include <algorithm>
#include <fstream>
#include <string>

namespace shardlm {

bool eval_prompt(Model& model, std::span<const TokenId> tokens, int32_t seq, int32_t start_pos,
                 const std::atomic<bool>* stop) {
  const size_t chunk = size_t(model.options().n_batch);
  Batch b;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    if (stop && stop->load()) return false;
    const size_t end = std::min(tokens.size(), begin + chunk);
    b.clear();
    for (size_t i = begin; i < end; ++i) b.add(seq, start_pos + int32_t(i), tokens[i], i + 1 == tokens.size());
    model.forward(b);
  }
  return true;
}

MemoryUsage read_memory_usage() {
  MemoryUsage m;
  std::ifstream in("/proc/self/status");
  std::string key;
  int64_t value;
  while (in >> key) {
    if (key == "VmRSS:" && in >> value) m.rss_kib = value;
    else if (key == "VmHWM:" && in >> value) m.hwm_kib = value;
  }
  return m;
}

}  // namespace shardlm
