// The dense FFN: SwiGLU of gate and up, then down. On a tensor-parallel rank
// whose neighbour computes some of its gate/up rows, or which computes some
// of a neighbour's (ForwardHooks::ffn_rows, parallel/ffn_balance.h), the
// neighbour's rows come first and go out at once, so they travel while this
// rank computes its own; the rows it did not compute arrive just before its
// down projection, which covers its own rows (RankPlan::ff_rows) as always.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/matmul.h"
#include "core/ops.h"
#include "model/model.h"

namespace shardlm {
namespace {

MatrixView row_view(const MatrixView& m, int64_t first, int64_t rows) {
  MatrixView v = m;
  v.data = m.row(first);  // a panel group's start: boundaries are multiples of 16 rows
  v.rows = rows;
  return v;
}

}  // namespace

void Model::gated_rows(const LayerWeights& L, PreparedInput& x, Range rows, float* out, int64_t out_stride,
                       const MatrixView* then) {
  const int64_t k = rows.size(), first = rows.begin - plan_.ff_held.begin;
  if (k <= 0) return;
  const MatrixView gate = row_view(L.w_gate, first, k), up = row_view(L.w_up, first, k);
  const MatmulTarget gate_up[] = {{&gate, gate_.data()}, {&up, up_.data()}};
  matmul_many(gate_up, x, opt_.pool, then);
  for_each_token([&](int64_t t) {
    ops::swiglu(&gate_[size_t(t * k)], &up_[size_t(t * k)], out + t * out_stride, k);
  });
}

void Model::dense_ffn(const LayerWeights& L, const MatrixView* then) {
  const int64_t n = n_tokens_;
  const Range own = plan_.ff_rows, held = plan_.ff_held;
  const Range rows = opt_.hooks.ffn_rows ? opt_.hooks.ffn_rows(n) : own;
  if (rows.begin < held.begin || rows.end > held.end || rows.begin > rows.end)
    throw Error(fmt::format("forward: FFN rows [{}, {}) outside the held rows [{}, {})", rows.begin, rows.end,
                            held.begin, held.end));
  PreparedInput normed(xn_.data(), n, config_.n_embd);  // quantized once for every gate and up product
  // Without the hook (all own rows, no neighbour) they are activated in place.
  float* act = ffn_act_.empty() ? gate_.data() : ffn_act_.data();
  const Range before{rows.begin, std::min(rows.end, own.begin)}, after{std::max(rows.begin, own.end), rows.end};
  for (const auto& [side, theirs] : {std::pair{-1, before}, std::pair{1, after}}) {
    if (theirs.size() <= 0) continue;
    gated_rows(L, normed, theirs, ffn_shipped_.data(), theirs.size(), nullptr);
    opt_.hooks.ffn_send(side, ffn_shipped_.data(), size_t(n * theirs.size()));
  }
  const Range mine{std::clamp(rows.begin, own.begin, own.end), std::clamp(rows.end, own.begin, own.end)};
  gated_rows(L, normed, mine, act + (mine.begin - own.begin), n_ff_, &L.w_down);
  const Range missing_before{own.begin, mine.begin}, missing_after{mine.end, own.end};
  for (const auto& [side, missing] : {std::pair{-1, missing_before}, std::pair{1, missing_after}}) {
    const int64_t k = missing.size(), at = missing.begin - own.begin;
    if (k <= 0) continue;
    if (n == 1) {
      opt_.hooks.ffn_recv(side, act + at, size_t(k));
      continue;
    }
    opt_.hooks.ffn_recv(side, ffn_shipped_.data(), size_t(n * k));
    for (int64_t t = 0; t < n; ++t)
      std::memcpy(act + t * n_ff_ + at, &ffn_shipped_[size_t(t * k)], size_t(k) * sizeof(float));
  }
  matmul(L.w_down, act, n, proj_.data(), opt_.pool, then);
}

}  // namespace shardlm
