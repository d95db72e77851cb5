// How many prompt tokens a step may take beside decoding sequences, so that
// such a step lasts at most `ratio` times a step of decode entries alone: the
// running streams' inter-token latency stays within that factor while a long
// prompt is read (chunked prefill paced by time, not only by a token count).
//
// The policy, and why:
// - A decode-only step of d sequences is modelled as a + b·d, and what a
//   step with p prompt tokens takes beyond it as f + c·p; both lines are
//   fitted by least squares over the recent steps (older steps weigh less:
//   attention grows with the context and the machine may be shared). A
//   mean of (step - decode step) / p would fold the fixed cost f into the
//   per-token cost: small chunks would make the next chunk smaller still.
//   While the chunks seen all had one size, f and c are not told apart and
//   c is that ratio (f = 0).
// - The room for prompt tokens is (ratio - 1) × the predicted decode step:
//   a step takes (room - f) / c tokens, but at least kMinTokens, also while
//   the costs are unknown. The floor matters on a shared machine: a step's
//   time varies more than a few prompt tokens cost, so chunks of 1-3 tokens
//   make every delay look like the tokens' cost, the estimate grows, the
//   chunks stay tiny and the prompts wait for tens of seconds (seen at load
//   9 on 2 CPUs). Eight tokens cost about one decode step of a small model
//   on a CPU, so the floor keeps mixed steps within ~2 decode steps.
// - Which prompts share the room is the Scheduler's: shortest remainder
//   first, so a short prompt is not queued behind a long one's chunks (its
//   TTFT is a few steps, not the long prompt's reading time).
// The chunk sizes it picks change no result (batching does not: Scheduler).
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

  // A step beside decoding sequences takes at least this many prompt tokens
  // (if it has them), and as many while the costs are unknown.
  static constexpr int64_t kMinTokens = 8;

 private:
  // y = alpha + beta·x fitted by least squares over weighted samples; the older, the lighter.
  class Line {
   public:
    void add(double x, double y);
    bool empty() const { return w_ == 0; }
    // What the line is when the xs seen do not spread: level at the mean y,
    // or through the origin and the means.
    enum class IfOneX { Level, ThroughOrigin };
    void fit(double& alpha, double& beta, IfOneX if_one_x) const;
    // Mean y over mean x (0 without positive xs).
    double slope_through_origin() const { return x_ > 0 ? y_ / x_ : 0; }

   private:
    double w_ = 0, x_ = 0, y_ = 0, xx_ = 0, xy_ = 0;  // weighted sums
  };
  double decode_seconds(int64_t n_decode) const;

  double ratio_;
  Line decode_;  // decode-only steps: seconds against decode entries
  Line extra_;   // steps with prompt entries: seconds beyond the predicted decode step against prompt entries
};

}  // namespace shardlm::serve
