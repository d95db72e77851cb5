// How many prompt tokens a step may take beside decoding sequences, so that
// such a step lasts at most `ratio` times a step of decode entries alone: the
// running streams' inter-token latency stays within that factor while a long
// prompt is read (chunked prefill paced by time, not only by a token count).
// It learns from the steps it is told about: the time of decode-only steps,
// and from steps with prompt entries the extra time per prompt token. The
// chunk sizes it picks change no result (batching does not: Scheduler).
#pragma once

#include <cstdint>

namespace shardlm::serve {

class PrefillPacer {
 public:
  // ratio <= 1: no pacing (budget() is always its limit).
  explicit PrefillPacer(double ratio) : ratio_(ratio) {}

  // A step ran with these entries in `seconds`.
  void observe(int64_t prompt_entries, int64_t decode_entries, double seconds);
  // Prompt entries for the next step beside n_decode decoding sequences: at most limit, at least 1.
  int64_t budget(int64_t n_decode, int64_t limit) const;

  // Until both costs are known, steps beside decoding sequences take this many prompt tokens.
  static constexpr int64_t kProbeTokens = 8;

 private:
  double ratio_;
  double decode_seconds_ = 0;  // running mean of decode-only steps; 0: none seen yet
  double token_seconds_ = 0;   // running mean of the extra seconds per prompt token; 0: none seen yet
};

}  // namespace shardlm::serve
