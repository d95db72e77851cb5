// Generated text on its way to a client: complete UTF-8 characters only
// (tokenizer StreamDecoder), and text that could still be the start of a stop
// string is held back until it can no longer match. A token's log-probabilities
// travel with its text: out once all of its text is out; at a stop string,
// those of tokens whose text begins before the match still go, the rest are
// dropped with their text.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "model/logprobs.h"
#include "serve/request_stream.h"
#include "tokenizer/tokenizer.h"

namespace shardlm::serve {

class StopText {
 public:
  // The text of the special tokens in `shown_special` is part of the output (StreamDecoder).
  StopText(const Tokenizer& tok, std::vector<std::string> stops, std::vector<TokenId> shown_special = {});

  struct Out {
    std::string text;      // safe to send now
    bool stopped = false;  // a stop string matched; it and everything after it are dropped
    std::vector<LogprobEntry> logprobs;  // of the tokens whose text is out now
  };
  Out push(TokenId token, const SampledLogprobs* logprobs = nullptr);
  Out finish();  // what was held back, when generation ends without a stop string

 private:
  struct Held {
    uint64_t begin, end;  // the token's text in the whole output, in bytes
    LogprobEntry entry;
  };
  Out release();
  LogprobEntry entry(TokenId token, const SampledLogprobs& lp) const;

  const Tokenizer& tok_;
  StreamDecoder decoder_;
  std::vector<std::string> stops_;
  std::string held_;
  uint64_t sent_ = 0;           // bytes of output released before held_
  std::deque<Held> logprobs_;   // tokens with log-probabilities, not out yet
};

}  // namespace shardlm::serve
