// The request rank 0 broadcasts to every rank, and the first stage's view of
// a sequence (private to parallel/runtime*.cpp).
#pragma once

#include <span>
#include <vector>

#include "parallel/runtime.h"

namespace shardlm::parallel {

enum RequestOp : int32_t { kGenerate = 1, kLogits = 2, kShutdown = 3 };

struct DistributedSession::Request {
  struct Header {
    int32_t op = kGenerate, n_seqs = 0, n_predict = 0, eos = -1;
    SamplerParams sampling;  // of sequence 0; sequence i uses seed + i
    int64_t n_tokens = 0;
  } h;
  std::vector<int32_t> lens;
  std::vector<TokenId> tokens;  // all prompts, concatenated

  std::span<const TokenId> prompt(int seq) const {
    size_t at = 0;
    for (int i = 0; i < seq; ++i) at += size_t(lens[size_t(i)]);
    return {tokens.data() + at, size_t(lens[size_t(seq)])};
  }
  SamplerParams sampling(int seq) const {
    SamplerParams p = h.sampling;
    p.seed += uint64_t(seq);
    return p;
  }
};

struct DistributedSession::Seq {
  size_t prefilled = 0;  // prompt tokens sent through
  int32_t pos = 0;       // next position
  TokenId next = -1;     // token to feed next
  int32_t generated = 0;
  bool in_flight = false, done = false;
};

}  // namespace shardlm::parallel
