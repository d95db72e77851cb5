// Mixture-of-experts FFN (mul_mat_id style): every token of the batch is
// routed first, then each expert that any token chose runs once over the
// gathered tokens, so its weights are read once per step; experts no token
// chose are never read.
//
// The chosen experts (and the shared experts) are not run one after another,
// each matrix split over the threads: at decode that would be 3 small matrix
// products per expert, each a thread-pool wake-up and barrier for ~1 MB of
// weights. Instead each phase (gather + quantize, gate and up, SwiGLU +
// quantize, down, weighted sum) is one parallel region over the row tasks of
// all experts together. Every output row is still computed whole by one
// thread with the kernel matmul() picks, and a token's experts are summed in
// expert order, so the result does not depend on the thread count, nor on the
// other tokens of the batch where the kernels do not (core/matmul.h
// TokenSums: panels, or batch invariance).
//
// Distributed, every rank routes every token the same way (the router reads
// the replicated normed hidden state) and runs only the experts it holds, or
// its row slice of each: its sum is a partial sum of the layer's output, which
// the FFN all-reduce completes as it does a dense FFN's.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <vector>

#include "core/matmul.h"
#include "core/ops.h"
#include "model/model.h"

namespace shardlm {
namespace {

// Rows of one matrix that one task computes; a multiple of the kernels' row
// alignment (16) and fixed, so the split does not depend on the thread count.
constexpr int64_t kRowsPerTask = 64;

// One FFN over a group of tokens: a routed expert over the tokens that chose
// it, or the shared experts over the whole batch.
struct ExpertJob {
  MatrixView gate, up, down;
  int64_t tokens = 0;
  int64_t first_row = 0;      // routed: its first row of the gathered buffers
  float* in = nullptr;        // tokens × n_embd
  float* gate_out = nullptr;  // tokens × ff, SwiGLU'd in place
  float* up_out = nullptr;    // tokens × ff
  float* out = nullptr;       // tokens × n_embd
};

// Row tasks of one matrix per job: (job, matrix, first row).
struct RowTask {
  int32_t job;
  int32_t matrix;  // index into the phase's matrices of the job
  int64_t r0;
};

// The tasks of the gate and up products (matrix 0 and 1), or of the down product.
std::vector<RowTask> row_tasks(const std::vector<ExpertJob>& jobs, bool down) {
  std::vector<RowTask> tasks;
  for (size_t j = 0; j < jobs.size(); ++j)
    for (int m = 0; m < (down ? 1 : 2); ++m)
      for (int64_t r0 = 0; r0 < (down ? jobs[j].down.rows : jobs[j].gate.rows); r0 += kRowsPerTask)
        tasks.push_back({int32_t(j), m, r0});
  return tasks;
}

// Rows [r0, r1) of w times x on the calling thread, into columns [r0, r1)
// of y (x's tokens × w.rows).
void matmul_rows(const MatrixView& w, int64_t r0, int64_t r1, PreparedInput& x, float* y) {
  MatrixView slice = w;
  slice.data = w.row(r0);
  slice.rows = r1 - r0;
  if (x.n_tokens() == 1) {
    matmul(slice, x, y + r0, nullptr);
    return;
  }
  thread_local std::vector<float> part;
  part.resize(size_t(x.n_tokens() * slice.rows));
  matmul(slice, x, part.data(), nullptr);
  for (int64_t t = 0; t < x.n_tokens(); ++t)
    std::memcpy(y + t * w.rows + r0, &part[size_t(t * slice.rows)], size_t(slice.rows) * sizeof(float));
}

using ParallelFor = std::function<void(bool worth_it, const std::function<void(int ith, int nth)>&)>;

// Slots (token · k + choice) ordered by expert, stably: expert e's tokens are
// rows [first[e], first[e + 1]) of the gathered buffers.
struct ExpertOrder {
  std::vector<int64_t> first, slot_row, row_slot;
};

ExpertOrder order_by_expert(const int32_t* ids, int64_t n_slots, int64_t n_expert) {
  ExpertOrder o{std::vector<int64_t>(size_t(n_expert + 1), 0), std::vector<int64_t>(size_t(n_slots)),
                std::vector<int64_t>(size_t(n_slots))};
  for (int64_t i = 0; i < n_slots; ++i) ++o.first[size_t(ids[i]) + 1];
  for (int64_t e = 0; e < n_expert; ++e) o.first[size_t(e + 1)] += o.first[size_t(e)];
  std::vector<int64_t> next(o.first.begin(), o.first.end() - 1);
  for (int64_t i = 0; i < n_slots; ++i) {
    const int64_t r = next[size_t(ids[i])]++;
    o.slot_row[size_t(i)] = r;
    o.row_slot[size_t(r)] = i;
  }
  return o;
}

// Runs every task of a phase, claimed from a shared counter (a thread that
// got less CPU does not hold the others at the barrier).
template <typename Body>
void run_tasks(const ParallelFor& parallel, const std::vector<RowTask>& tasks, Body&& body) {
  std::atomic<size_t> next{0};
  parallel(true, [&](int, int) {
    for (size_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < tasks.size();) body(tasks[i]);
  });
}

// Every job's FFN: the routed jobs (the first n_routed) gather their tokens'
// rows of xn, then gate and up, SwiGLU and down run as one parallel region each.
void run_jobs(const std::vector<ExpertJob>& jobs, size_t n_routed, const std::vector<int64_t>& row_slot,
              const float* xn, int64_t k, int64_t d, const ParallelFor& parallel, TokenSums sums) {
  // Gather each expert's tokens and quantize them once for gate and up.
  std::vector<PreparedInput> inputs;
  inputs.reserve(jobs.size());
  for (const auto& j : jobs) inputs.emplace_back(j.in, j.tokens, d, sums);
  parallel(true, [&](int ith, int nth) {
    for (size_t j = size_t(ith); j < jobs.size(); j += size_t(nth)) {
      if (j < n_routed)
        for (int64_t r = 0; r < jobs[j].tokens; ++r)
          std::memcpy(&jobs[j].in[size_t(r * d)], &xn[size_t(row_slot[size_t(jobs[j].first_row + r)] / k * d)],
                      size_t(d) * sizeof(float));
      size_t stride = 0;
      inputs[j].for_type(jobs[j].gate.type, nullptr, &stride);
      inputs[j].for_type(jobs[j].up.type, nullptr, &stride);
    }
  });

  run_tasks(parallel, row_tasks(jobs, false), [&](const RowTask& t) {
    const ExpertJob& j = jobs[size_t(t.job)];
    const MatrixView& w = t.matrix == 0 ? j.gate : j.up;
    matmul_rows(w, t.r0, std::min(w.rows, t.r0 + kRowsPerTask), inputs[size_t(t.job)],
                t.matrix == 0 ? j.gate_out : j.up_out);
  });
  inputs.clear();

  // SwiGLU, then the down projection's input quantized once per job.
  std::vector<PreparedInput> hidden;
  hidden.reserve(jobs.size());
  for (const auto& j : jobs) hidden.emplace_back(j.gate_out, j.tokens, j.gate.rows, sums);
  parallel(true, [&](int ith, int nth) {
    for (size_t j = size_t(ith); j < jobs.size(); j += size_t(nth)) {
      ops::swiglu(jobs[j].gate_out, jobs[j].up_out, jobs[j].gate_out, jobs[j].tokens * jobs[j].gate.rows);
      size_t stride = 0;
      hidden[j].for_type(jobs[j].down.type, nullptr, &stride);
    }
  });

  run_tasks(parallel, row_tasks(jobs, true), [&](const RowTask& t) {
    const ExpertJob& j = jobs[size_t(t.job)];
    matmul_rows(j.down, t.r0, std::min(d, t.r0 + kRowsPerTask), hidden[size_t(t.job)], j.out);
  });
}

}  // namespace

void Model::expert_ffn(const LayerWeights& L) {
  const auto& c = config_;
  const auto& m = c.moe;
  const auto& E = L.experts;
  const int64_t n = n_tokens_, k = m.n_expert_used, d = c.n_embd;

  PreparedInput normed(xn_.data(), n, d, token_sums());
  matmul(E.router, normed, router_logits_.data(), opt_.pool);
  for (int64_t t = 0; t < n; ++t)
    router_->route(&router_logits_[size_t(t * m.n_expert)], E.selection_bias, &expert_ids_[size_t(t * k)],
                   &expert_weights_[size_t(t * k)]);
  const ExpertOrder order = order_by_expert(expert_ids_.data(), n * k, m.n_expert);

  std::vector<ExpertJob> jobs;
  const int64_t ff = E.gate.rows_per_expert;  // of each expert, the rows this rank holds
  for (int64_t e = plan_.experts.begin; e < plan_.experts.end; ++e) {
    const int64_t r = order.first[size_t(e)], rows = order.first[size_t(e + 1)] - r;
    if (rows == 0) continue;
    jobs.push_back({E.gate.expert(e), E.up.expert(e), E.down.expert(e), rows, r, &expert_in_[size_t(r * d)],
                    &expert_gate_[size_t(r * ff)], &expert_up_[size_t(r * ff)], &expert_out_[size_t(r * d)]});
  }
  const size_t n_routed = jobs.size();
  if (E.shared_gate.data)
    jobs.push_back({E.shared_gate, E.shared_up, E.shared_down, n, 0, xn_.data(), gate_.data(), up_.data(),
                    &expert_out_[size_t(n * k * d)]});
  const ParallelFor parallel = [this](bool worth_it, const std::function<void(int, int)>& fn) {
    run_parallel(worth_it, fn);
  };
  run_jobs(jobs, n_routed, order.row_slot, xn_.data(), k, d, parallel, token_sums());

  // Each token's experts weighted and summed in expert order, then the shared experts.
  const float* shared_out = jobs.size() > n_routed ? jobs.back().out : nullptr;
  const auto held = [&](int32_t e) { return e >= plan_.experts.begin && e < plan_.experts.end; };
  run_parallel(n > 1, [&](int ith, int nth) {
    std::vector<int64_t> slots(static_cast<size_t>(k));
    for (int64_t t = ith; t < n; t += nth) {
      for (int64_t i = 0; i < k; ++i) slots[size_t(i)] = t * k + i;
      std::sort(slots.begin(), slots.end(),
                [&](int64_t a, int64_t b) { return expert_ids_[size_t(a)] < expert_ids_[size_t(b)]; });
      float* y = &proj_[size_t(t * d)];
      std::fill_n(y, d, 0.0f);
      for (int64_t slot : slots)
        if (held(expert_ids_[size_t(slot)]))
          ops::axpy(expert_weights_[size_t(slot)], &expert_out_[size_t(order.slot_row[size_t(slot)] * d)], y, d);
      if (shared_out) ops::add(y, shared_out + t * d, y, d);
    }
  });
}

}  // namespace shardlm
