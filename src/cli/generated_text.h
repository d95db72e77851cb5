// What `run` prints on stdout, on one machine or on a cluster: the prompt
// (unless --no-display-prompt), then the generated text as it comes, cut at
// the end-of-generation token or the first --stop string, then a newline.
#pragma once

#include <string>
#include <vector>

#include "cli/stop_strings.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::cli {

class GeneratedText {
 public:
  GeneratedText(const Tokenizer& tokenizer, std::vector<std::string> stops, bool display_prompt);
  void begin(const std::string& prompt);
  // False once generation should end: the model's end token or a stop string.
  bool push(TokenId token);
  void end();
  bool ended() const { return ended_; }

 private:
  void print(const std::string& text);

  const Tokenizer& tokenizer_;
  StreamDecoder decoder_;
  StopStrings stops_;
  bool display_prompt_;
  bool ended_ = false;
};

}  // namespace shardlm::cli
