#include "model/prompt.h"

#include <algorithm>

namespace shardlm {

void eval_prompt(Model& model, std::span<const TokenId> tokens, int32_t seq, int32_t start_pos) {
  const size_t chunk = size_t(model.options().n_batch);
  Batch b;
  for (size_t begin = 0; begin < tokens.size(); begin += chunk) {
    const size_t end = std::min(tokens.size(), begin + chunk);
    b.clear();
    for (size_t i = begin; i < end; ++i) b.add(seq, start_pos + int32_t(i), tokens[i], i + 1 == tokens.size());
    model.forward(b);
  }
}

}  // namespace shardlm
