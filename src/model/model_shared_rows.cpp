// Column-parallel products whose rows a tensor-parallel rank may compute for
// a neighbour, or a neighbour for it (ForwardHooks::rows,
// parallel/row_balance.h): a dense FFN's gate/up, and the output's rows. The
// neighbour's rows come first and go out at once, so they travel while this
// rank computes its own; the rows it did not compute arrive last, just
// before the FFN's down projection (over its own rows, RankPlan::ff_rows, as
// always) or the sampling of its logits.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>

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

// n tokens' k values, packed, into rows of `stride` values.
void unpack_rows(const float* packed, int64_t n, int64_t k, float* dst, int64_t stride) {
  for (int64_t t = 0; t < n; ++t) std::memcpy(dst + t * stride, packed + t * k, size_t(k) * sizeof(float));
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

void Model::share_rows(SharedRows what, Range own, Range held, int64_t n, float* out, float* shipped,
                       const std::function<void(Range rows, float* dst, int64_t stride)>& compute) {
  const Range rows = opt_.hooks.rows ? opt_.hooks.rows(what, n) : own;
  if (rows.begin < held.begin || rows.end > held.end || rows.begin > rows.end)
    throw Error(fmt::format("forward: rows [{}, {}) to compute outside the held rows [{}, {})", rows.begin, rows.end,
                            held.begin, held.end));
  const Range before{rows.begin, std::min(rows.end, own.begin)}, after{std::max(rows.begin, own.end), rows.end};
  for (const auto& [side, theirs] : {std::pair{-1, before}, std::pair{1, after}}) {
    if (theirs.size() <= 0) continue;
    compute(theirs, shipped, theirs.size());
    opt_.hooks.send_rows(what, side, shipped, size_t(n * theirs.size()));
  }
  const int64_t width = own.size();
  const Range mine{std::clamp(rows.begin, own.begin, own.end), std::clamp(rows.end, own.begin, own.end)};
  if (mine.size() > 0) compute(mine, out + (mine.begin - own.begin), width);
  const Range missing_before{own.begin, mine.begin}, missing_after{mine.end, own.end};
  for (const auto& [side, missing] : {std::pair{-1, missing_before}, std::pair{1, missing_after}}) {
    const int64_t k = missing.size(), at = missing.begin - own.begin;
    if (k <= 0) continue;
    if (n == 1) {
      opt_.hooks.recv_rows(what, side, out + at, size_t(k));
      continue;
    }
    opt_.hooks.recv_rows(what, side, shipped, size_t(n * k));
    unpack_rows(shipped, n, k, out + at, width);
  }
}

void Model::dense_ffn(const LayerWeights& L, const MatrixView* then) {
  const int64_t n = n_tokens_;
  PreparedInput normed(xn_.data(), n, config_.n_embd, token_sums());  // quantized once for every gate and up product
  // Without the hooks (all own rows, no neighbour) they are activated in place.
  float* act = ffn_act_.empty() ? gate_.data() : ffn_act_.data();
  share_rows(SharedRows::Ffn, plan_.ff_rows, plan_.ff_held, n, act, ffn_shipped_.data(),
             [&](Range rows, float* dst, int64_t stride) { gated_rows(L, normed, rows, dst, stride, &L.w_down); });
  matmul(L.w_down, act, n, proj_.data(), opt_.pool, then, token_sums());
}

void Model::output_rows(Range rows, float* dst, int64_t stride, const MatrixView* then) {
  const int64_t k = rows.size(), n = n_out_;
  const MatrixView w = row_view(weights_.output, rows.begin - plan_.vocab_held.begin, k);
  if (n == 1 || stride == k) {
    matmul(w, out_in_.data(), n, dst, opt_.pool, then, token_sums());
    return;
  }
  matmul(w, out_in_.data(), n, vocab_scratch_.data(), opt_.pool, then, token_sums());
  unpack_rows(vocab_scratch_.data(), n, k, dst, stride);
}

}  // namespace shardlm
