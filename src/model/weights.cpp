#include "model/weights.h"

#include <fmt/format.h>

#include <cstring>

#include "core/error.h"
#include "gguf/gguf.h"

namespace shardlm {
namespace {

class TensorMapper {
 public:
  explicit TensorMapper(const gguf::File& f) : f_(f) {}

  // A [cols, rows] matrix restricted to rows [r.begin, r.end).
  MatrixView row_slice(const std::string& name, int64_t cols, int64_t rows, Range r) const {
    MatrixView m = matrix(name, cols, rows);
    m.data = m.row(r.begin);
    m.rows = r.size();
    return m;
  }

  // A [cols, rows] matrix restricted to columns [c.begin, c.end): rows keep
  // their full stride, so the slice must start and end on block boundaries.
  MatrixView col_slice(const std::string& name, int64_t cols, int64_t rows, Range c) const {
    MatrixView m = matrix(name, cols, rows);
    const int64_t block = traits(m.type).block_elems;
    if (c.begin % block != 0 || c.size() % block != 0)
      throw Error(fmt::format("{}: tensor '{}' ({}) cannot be split at columns [{}, {}): blocks hold {} values",
                              f_.path(), name, dtype_name(m.type), c.begin, c.end, block));
    m.data = static_cast<const uint8_t*>(m.data) + row_bytes(m.type, c.begin);
    m.cols = c.size();
    return m;
  }

  MatrixView matrix(const std::string& name, int64_t cols, int64_t rows) const {
    const auto& t = f_.require_tensor(name);
    check_shape(t, cols, rows);
    if (!traits(t.type).compute)
      throw Error(fmt::format("{}: tensor '{}' has type {}, which this engine cannot compute with", f_.path(), name,
                              dtype_name(t.type)));
    MatrixView m;
    m.type = t.type;
    m.data = t.data;
    m.rows = rows;
    m.cols = cols;
    m.row_stride = t.row_size();
    return m;
  }

  // A 1-D f32 tensor of n values, restricted to [r.begin, r.end).
  const float* vector(const std::string& name, int64_t n, Range r) const {
    const auto& t = f_.require_tensor(name);
    check_shape(t, n, 1);
    if (t.type != DType::F32)
      throw Error(fmt::format("{}: tensor '{}' has type {}, expected F32", f_.path(), name, dtype_name(t.type)));
    return reinterpret_cast<const float*>(t.data) + r.begin;
  }
  const float* vector(const std::string& name, int64_t n) const { return vector(name, n, Range{0, n}); }

 private:
  void check_shape(const gguf::TensorInfo& t, int64_t ne0, int64_t ne1) const {
    if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != 1 || t.ne[3] != 1)
      throw Error(fmt::format("{}: tensor '{}' has shape {}, expected [{}, {}]", f_.path(), t.name, t.shape_string(),
                              ne0, ne1));
  }
  const gguf::File& f_;
};

Range scaled(Range r, int64_t k) { return {r.begin * k, r.end * k}; }

size_t matrix_bytes(const MatrixView& m) { return size_t(m.rows) * row_bytes(m.type, m.cols); }

}  // namespace

ModelWeights ModelWeights::map(const gguf::File& file, const ModelConfig& c, const RankPlan& plan) {
  plan.validate(c);
  const TensorMapper t(file);
  ModelWeights w;
  w.token_embd = t.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  if (c.rope_has_freq_factors) w.rope_freq_factors = t.vector("rope_freqs.weight", c.rope_dims / 2);

  const Range q_rows = scaled(plan.heads, c.head_dim_k);
  const Range k_rows = scaled(plan.kv_heads, c.head_dim_k);
  const Range v_rows = scaled(plan.kv_heads, c.head_dim_v);
  const Range o_cols = scaled(plan.heads, c.head_dim_v);
  for (int64_t l = plan.layers.begin; l < plan.layers.end; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights L;
    L.attn_norm = t.vector(p + "attn_norm.weight", c.n_embd);
    L.wq = t.row_slice(p + "attn_q.weight", c.n_embd, c.q_dim(), q_rows);
    L.wk = t.row_slice(p + "attn_k.weight", c.n_embd, c.kv_dim_k(), k_rows);
    L.wv = t.row_slice(p + "attn_v.weight", c.n_embd, c.kv_dim_v(), v_rows);
    if (c.has_qkv_bias) {
      L.bq = t.vector(p + "attn_q.bias", c.q_dim(), q_rows);
      L.bk = t.vector(p + "attn_k.bias", c.kv_dim_k(), k_rows);
      L.bv = t.vector(p + "attn_v.bias", c.kv_dim_v(), v_rows);
    }
    if (c.has_qk_norm) {
      L.q_norm = t.vector(p + "attn_q_norm.weight", c.head_dim_k);
      L.k_norm = t.vector(p + "attn_k_norm.weight", c.head_dim_k);
    }
    L.wo = t.col_slice(p + "attn_output.weight", c.n_head * c.head_dim_v, c.n_embd, o_cols);
    L.ffn_norm = t.vector(p + "ffn_norm.weight", c.n_embd);
    L.w_gate = t.row_slice(p + "ffn_gate.weight", c.n_embd, c.n_ff, plan.ff_rows);
    L.w_up = t.row_slice(p + "ffn_up.weight", c.n_embd, c.n_ff, plan.ff_rows);
    L.w_down = t.col_slice(p + "ffn_down.weight", c.n_ff, c.n_embd, plan.ff_rows);
    w.layers.push_back(L);
  }
  if (plan.last_stage(c)) {
    w.output_norm = t.vector("output_norm.weight", c.n_embd);
    const std::string out = c.tied_output ? "token_embd.weight" : "output.weight";
    w.output = t.row_slice(out, c.n_embd, c.n_vocab, plan.vocab_rows);
  }
  return w;
}

size_t ModelWeights::matrix_bytes_per_token() const {
  size_t n = 0;
  for (const auto& L : layers)
    for (const MatrixView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) n += matrix_bytes(*m);
  if (output.data) n += matrix_bytes(output);
  return n;
}

void ModelWeights::pack_column_slices() {
  auto pack = [&](MatrixView& m) {
    const size_t row = row_bytes(m.type, m.cols);
    if (!m.data || row == m.row_stride) return;
    std::shared_ptr<uint8_t[]> copy(new uint8_t[row * size_t(m.rows)]);
    for (int64_t r = 0; r < m.rows; ++r) std::memcpy(copy.get() + size_t(r) * row, m.row(r), row);
    m.data = copy.get();
    m.row_stride = row;
    packed.push_back(std::move(copy));
  };
  for (auto& L : layers) {
    pack(L.wo);
    pack(L.w_down);
  }
}

}  // namespace shardlm
