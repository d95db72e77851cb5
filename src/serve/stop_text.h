// Generated text on its way to a client: complete UTF-8 characters only
// (tokenizer StreamDecoder), and text that could still be the start of a stop
// string is held back until it can no longer match.
#pragma once

#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace shardlm::serve {

class StopText {
 public:
  StopText(const Tokenizer& tok, std::vector<std::string> stops);

  struct Out {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string matched; it and everything after it are dropped
  };
  Out push(TokenId token);
  std::string finish();  // what was held back, when generation ends without a stop string

 private:
  Out release();

  StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;
};

}  // namespace shardlm::serve
