// One step of the distributed engine as it travels: rank 0 of the workers
// broadcasts it to every rank, and the coordinator sends the same bytes to
// the driving worker on its control connection (cluster/job_wire.h). A step
// is the sequence operations since the last step, in order (add a slot with
// its sampling parameters and the tail of its kept prefix that the penalties
// see; free a slot), then the step's entries. Everything is checked on
// decode: the bytes may come from the network.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/sampler.h"

namespace shardlm::parallel {

enum class StepKind : int32_t {
  Step = 1,      // run the entries; sample where an entry asks
  Logits = 2,    // run the entries; the full logits of the one sampling entry go to rank 0
  Mark = 3,      // no entries: every rank closes a stats period (cluster benchmarks)
  Shutdown = 4,  // no entries: followers return
};

struct SeqOp {
  bool add = false;          // false: free
  int32_t slot = 0;
  SamplerParams params;      // add: the slot's sampling
  std::vector<TokenId> recent;  // add: the kept prefix's last penalty_window tokens
};

struct StepMessage {
  StepKind kind = StepKind::Step;
  std::vector<SeqOp> ops;
  Batch entries;  // BatchEntry::seq is the slot, want_logits: sample

  std::vector<uint8_t> encode() const;
  // Throws Error naming `who` for anything malformed or outside the limits.
  static StepMessage decode(std::span<const uint8_t> bytes, int64_t n_slots, int64_t max_entries, int64_t n_ctx,
                            int64_t n_vocab, const std::string& who);
};

// A (slot, token) the engine sampled.
struct SlotToken {
  int32_t slot = 0;
  TokenId token = 0;
  std::optional<SampledLogprobs> logprobs;  // when the slot's SamplerParams::logprobs >= 0
};

// Sampled tokens as they travel (last stage → first stage, driver →
// coordinator): per token i32 slot, i32 token, i32 top count (-1: no
// log-probabilities), then with log-probabilities f32 logprob and
// top count × (i32 id, f32 logprob).
std::vector<uint8_t> encode_tokens(std::span<const SlotToken> tokens);
constexpr size_t kMaxEncodedTokenBytes = 16 + 8 * size_t(kMaxTopLogprobs);
// Throws Error naming `who` for malformed bytes, ids outside the vocabulary or
// slots, or a log-probability that is not <= 0.
std::vector<SlotToken> decode_tokens(std::span<const uint8_t> bytes, int64_t n_slots, int64_t n_vocab,
                                     const std::string& who);

// The step's entries cut into at most `parts` micro-batches along sequence
// boundaries (a slot's entries stay together and in order), each with about
// the same number of entries, so pipeline stages can work on different
// sequences at once. Every rank computes the same cut from the same entries.
std::vector<Batch> split_by_sequence(const Batch& entries, int parts);

// Throws Error naming `what` when sampling parameters are outside what the sampler accepts.
void check_sampler_params(const SamplerParams& p, const std::string& what);


// The driving side's bookkeeping of a step-level engine: which slots are
// live, and the operations to send with the next step. Checks what the caller
// asks (slots, positions are the executing ranks' business) so that a
// mistake is an Error here, not a failed job.
class StepBuilder {
 public:
  StepBuilder(int64_t n_slots, int64_t max_entries, int64_t n_ctx, int64_t n_vocab)
      : live_(size_t(n_slots), false), max_entries_(max_entries), n_ctx_(n_ctx), n_vocab_(n_vocab) {}
  void add(int32_t slot, const SamplerParams& params, std::span<const TokenId> kept_prefix);
  void free(int32_t slot);
  // The pending operations with these entries; the operations are cleared.
  StepMessage take(StepKind kind, const Batch& entries);
  bool live(int32_t slot) const { return slot >= 0 && size_t(slot) < live_.size() && live_[size_t(slot)]; }

 private:
  void check_slot(int32_t slot, const char* what) const;
  std::vector<bool> live_;
  int64_t max_entries_, n_ctx_, n_vocab_;
  std::vector<SeqOp> pending_;
};

}  // namespace shardlm::parallel
