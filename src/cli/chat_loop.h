// `shardlm run --chat` (llama.cpp's -cnv): a conversation in the terminal.
// Each line read is a user message; the whole conversation is rendered with
// the model's chat template (ChatML when the GGUF has none) with the
// generation prompt, and only the tokens after the part the KV cache already
// holds are computed; the reply streams to stdout. Ends at end of input or
// a line "/exit".
#pragma once

#include <cstdint>
#include <istream>
#include <string>
#include <vector>

#include "model/sampler.h"

namespace shardlm::cli {

struct ChatRequest {
  std::string model;
  std::string system;  // -p: the system message; empty: none
  int n_predict = 0;   // per reply; -1: until the end of text or context
  SamplerParams sampling;  // seed chosen
  int threads = 0;
  int64_t ctx = 0, batch = 0;
  std::string kv_type;
  std::vector<std::string> stops;
  std::string template_file;  // --chat-template-file: instead of the GGUF's template
};

void run_chat(const ChatRequest& r, std::istream& in);

}  // namespace shardlm::cli
