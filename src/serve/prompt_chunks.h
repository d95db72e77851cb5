// How one step's prompt budget is shared among the prompts being read.
//
// The policy, and why:
// - Shortest remainder first: a short prompt is read in a few steps instead
//   of waiting behind a long one's chunks (its time to first token is its
//   own reading time, not the long prompt's).
// - Prompts read side by side finish in the same step (a cohort): every
//   prompt's last token, the one that samples, is held back until all of the
//   cohort's last tokens fit in one step. A stream's decode window then holds
//   only decode steps: if the prompts of a burst finished one by one, the
//   first finishers would decode beside the later ones' chunks, each such
//   step costing them the chunk's time (with many short prompts most of a
//   stream's window can go to its neighbours' prompts), and the ends of
//   their generations would stay staggered, so their next requests would
//   again arrive one by one. Holding changes no total work: the cohort is
//   read in as many steps as before, only the samples move to the last one.
// - The cohort is bounded in steps, so holding costs the shortest member at
//   most `cohort_steps` steps of time to first token: it is the shortest
//   prompts whose remainders fit in cohort_steps × budget tokens (at the
//   serve defaults 8 × 256 = 2048 tokens, the size of llama-server's default
//   batch, in which it reads such a burst in one step). A longer prompt is read after
//   it, shortest first, as before. Beside decoding sequences the budget is
//   paced (PrefillPacer), so the same bound admits only a prompt or two.
// - While holding, a step takes only what leaves exactly one full budget for
//   the last step, so the cohort needs ceil(tokens / budget) steps, no more.
// Chunk sizes change no result (batching does not: Scheduler).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace shardlm::serve {

// remainders: the prompt tokens each prompt has left to read (all > 0),
// shortest first. Returns how many to read from each this step, in the same
// order; the sum is at most budget (> 0), and positive while any are left.
// cohort_steps < 1: no cohort (every prompt finishes as soon as it can).
std::vector<int64_t> plan_prompt_chunks(std::span<const int64_t> remainders, int64_t budget, int64_t cohort_steps);

}  // namespace shardlm::serve
