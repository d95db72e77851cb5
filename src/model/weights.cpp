#include "model/weights.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/huge_pages.h"
#include "core/matmul.h"
#include "core/quant.h"
#include "gguf/gguf.h"

namespace shardlm {
namespace {

class TensorMapper {
 public:
  // With `vector_copies`, vector() returns copies kept there.
  TensorMapper(const gguf::File& f, std::vector<std::vector<float>>* vector_copies)
      : f_(f), vector_copies_(vector_copies) {}

  // A [cols, rows] matrix restricted to rows [r.begin, r.end).
  MatrixView row_slice(const std::string& name, int64_t cols, int64_t rows, Range r) const {
    MatrixView m = matrix(name, cols, rows);
    m.data = m.row(r.begin);
    m.rows = r.size();
    return m;
  }

  // A [cols, rows] matrix restricted to columns [c.begin, c.end): rows keep
  // their full stride, so the slice must start and end on block boundaries.
  MatrixView col_slice(const std::string& name, int64_t cols, int64_t rows, Range c, int64_t n = 1) const {
    MatrixView m = matrix(name, cols, rows, n);
    const int64_t block = traits(m.type).block_elems;
    if (c.begin % block != 0 || c.size() % block != 0)
      throw Error(fmt::format("{}: tensor '{}' ({}) cannot be split at columns [{}, {}): blocks hold {} values",
                              f_.path(), name, dtype_name(m.type), c.begin, c.end, block));
    m.data = static_cast<const uint8_t*>(m.data) + row_bytes(m.type, c.begin);
    m.cols = c.size();
    return m;
  }

  // A [cols, rows, n] tensor as one matrix of n · rows rows.
  MatrixView matrix(const std::string& name, int64_t cols, int64_t rows, int64_t n = 1) const {
    const auto& t = f_.require_tensor(name);
    check_shape(t, cols, rows, n);
    if (!traits(t.type).compute)
      throw Error(fmt::format("{}: tensor '{}' has type {}, which this engine cannot compute with", f_.path(), name,
                              dtype_name(t.type)));
    MatrixView m;
    m.type = t.type;
    m.data = t.data;
    m.rows = rows * n;
    m.cols = cols;
    m.row_stride = t.row_size();
    return m;
  }

  // The experts `held` of a [cols, rows, n] tensor, of each the rows `r` and the columns `c`.
  ExpertStack experts(const std::string& name, int64_t cols, int64_t rows, int64_t n, Range held, Range r,
                      Range c) const {
    ExpertStack s;
    s.all = col_slice(name, cols, rows, c, n);
    s.all.data = s.all.row(held.begin * rows + r.begin);
    s.all.rows = (held.size() - 1) * rows + r.size();
    s.first = held.begin;
    s.count = held.size();
    s.rows_per_expert = r.size();
    s.row_step = rows;
    return s;
  }
  ExpertStack experts(const std::string& name, int64_t cols, int64_t rows, int64_t n) const {
    return experts(name, cols, rows, n, {0, n}, {0, rows}, {0, cols});
  }

  // A 1-D f32 tensor of n values, restricted to [r.begin, r.end).
  const float* vector(const std::string& name, int64_t n, Range r) const {
    const auto& t = f_.require_tensor(name);
    check_shape(t, n, 1, 1);
    if (t.type != DType::F32)
      throw Error(fmt::format("{}: tensor '{}' has type {}, expected F32", f_.path(), name, dtype_name(t.type)));
    const uint8_t* view = t.data + size_t(r.begin) * sizeof(float);
    if (!vector_copies_) return reinterpret_cast<const float*>(view);
    std::vector<float> copy(size_t(r.size()));
    std::memcpy(copy.data(), view, copy.size() * sizeof(float));
    vector_copies_->push_back(std::move(copy));  // moving the outer vector keeps each copy's address
    return vector_copies_->back().data();
  }
  const float* vector(const std::string& name, int64_t n) const { return vector(name, n, Range{0, n}); }

  bool has(const std::string& name) const { return f_.find_tensor(name) != nullptr; }

 private:
  void check_shape(const gguf::TensorInfo& t, int64_t ne0, int64_t ne1, int64_t ne2) const {
    if (t.ne[0] != ne0 || t.ne[1] != ne1 || t.ne[2] != ne2 || t.ne[3] != 1)
      throw Error(fmt::format("{}: tensor '{}' has shape {}, expected [{}, {}{}]", f_.path(), t.name,
                              t.shape_string(), ne0, ne1, ne2 > 1 ? fmt::format(", {}", ne2) : ""));
  }
  const gguf::File& f_;
  std::vector<std::vector<float>>* vector_copies_;
};

// Copies stretches of a mapped file's bytes with pread(2): a copy from the
// page cache that does not fault the mapping in (this machine's page cache
// served some mapped files at a fraction of memory speed; reading them was
// fast). From the mapping itself where the file cannot be reopened, and for
// bytes outside it.
class FileReader {
 public:
  explicit FileReader(const gguf::File& file)
      : file_(file), fd_(file.mapped() ? ::open(file.path().c_str(), O_RDONLY | O_CLOEXEC) : -1) {}
  ~FileReader() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;

  bool holds(const void* p) const {
    const auto* b = static_cast<const uint8_t*>(p);
    return file_.mapped() && b >= file_.bytes() && b < file_.bytes() + file_.file_size();
  }
  // The n bytes at `from` to `to`.
  void copy(uint8_t* to, const void* from, size_t n) const {
    if (fd_ < 0 || !holds(from)) return void(std::memcpy(to, from, n));
    const auto start = off_t(static_cast<const uint8_t*>(from) - file_.bytes());
    for (size_t done = 0; done < n;) {
      const ssize_t got = ::pread(fd_, to + done, n - done, start + off_t(done));
      if (got > 0) {
        done += size_t(got);
      } else if (got == 0 || errno != EINTR) {
        throw Error(fmt::format("{}: reading {} bytes at offset {}: {}", file_.path(), n - done, start + off_t(done),
                                got < 0 ? std::strerror(errno) : "the file is shorter than its mapping"));
      }
    }
  }

 private:
  const gguf::File& file_;
  int fd_;
};

Range scaled(Range r, int64_t k) { return {r.begin * k, r.end * k}; }

size_t matrix_bytes(const MatrixView& m) { return m.data ? size_t(m.rows) * row_bytes(m.type, m.cols) : 0; }

// The rows [first, first + n) of m as an f32 matrix transposed: n columns, m.cols rows.
std::vector<float> transposed_rows(const MatrixView& m, int64_t first, int64_t n) {
  std::vector<float> row(size_t(m.cols)), out(size_t(n * m.cols));
  for (int64_t r = 0; r < n; ++r) {
    dequantize_row(m.type, m.row(first + r), row.data(), m.cols);
    for (int64_t c = 0; c < m.cols; ++c) out[size_t(c * n + r)] = row[size_t(c)];
  }
  return out;
}

MatrixView f32_matrix(const std::vector<float>& v, int64_t cols, int64_t rows) {
  return {DType::F32, v.data(), rows, cols, size_t(cols) * sizeof(float)};
}

void map_latent_attention(const TensorMapper& t, const std::string& p, const ModelConfig& c, const RankPlan& plan,
                          ModelWeights& w, LayerWeights& L) {
  const auto& s = c.attention.latent;
  auto& a = L.latent;
  const Range q_rows = scaled(plan.heads, s.qk_dim());
  if (s.q_lora_rank > 0) {
    a.wq_a = t.matrix(p + "attn_q_a.weight", c.n_embd, s.q_lora_rank);
    a.q_a_norm = t.vector(p + "attn_q_a_norm.weight", s.q_lora_rank);
    a.wq = t.row_slice(p + "attn_q_b.weight", s.q_lora_rank, c.n_head * s.qk_dim(), q_rows);
  } else {
    a.wq = t.row_slice(p + "attn_q.weight", c.n_embd, c.n_head * s.qk_dim(), q_rows);
  }
  a.wkv_a = t.matrix(p + "attn_kv_a_mqa.weight", c.n_embd, s.kv_lora_rank + s.qk_rope_dim);
  a.kv_a_norm = t.vector(p + "attn_kv_a_norm.weight", s.kv_lora_rank);
  if (s.joined_kv_b) {
    // Head h's rows: qk_nope rows of k_nope, then v_dim rows of v, each over the latent.
    const int64_t per_head = s.qk_nope_dim + s.v_dim;
    const MatrixView kv_b = t.matrix(p + "attn_kv_b.weight", s.kv_lora_rank, c.n_head * per_head);
    for (int64_t h = plan.heads.begin; h < plan.heads.end; ++h) {
      w.derived.push_back(transposed_rows(kv_b, h * per_head, s.qk_nope_dim));
      a.k_b.push_back(f32_matrix(w.derived.back(), s.qk_nope_dim, s.kv_lora_rank));
      MatrixView v = kv_b;
      v.data = kv_b.row(h * per_head + s.qk_nope_dim);
      v.rows = s.v_dim;
      a.v_b.push_back(v);
    }
  } else {
    const ExpertStack k_b = t.experts(p + "attn_k_b.weight", s.qk_nope_dim, s.kv_lora_rank, c.n_head);
    const ExpertStack v_b = t.experts(p + "attn_v_b.weight", s.kv_lora_rank, s.v_dim, c.n_head);
    for (int64_t h = plan.heads.begin; h < plan.heads.end; ++h) {
      a.k_b.push_back(k_b.expert(h));
      a.v_b.push_back(v_b.expert(h));
    }
  }
}

void map_experts(const TensorMapper& t, const std::string& p, const ModelConfig& c, const RankPlan& plan,
                 LayerWeights& L) {
  const auto& m = c.moe;
  auto& e = L.experts;
  const Range all_embd{0, c.n_embd};
  e.router = t.matrix(p + "ffn_gate_inp.weight", c.n_embd, m.n_expert);
  if (m.selection_bias) e.selection_bias = t.vector(p + "exp_probs_b.bias", m.n_expert);
  e.gate = t.experts(p + "ffn_gate_exps.weight", c.n_embd, m.n_ff_expert, m.n_expert, plan.experts, plan.expert_rows,
                     all_embd);
  e.up = t.experts(p + "ffn_up_exps.weight", c.n_embd, m.n_ff_expert, m.n_expert, plan.experts, plan.expert_rows,
                   all_embd);
  e.down = t.experts(p + "ffn_down_exps.weight", m.n_ff_expert, c.n_embd, m.n_expert, plan.experts, all_embd,
                     plan.expert_rows);
  e.n_used = m.n_expert_used;
  if (m.n_shared > 0 && plan.shared_rows.size() > 0) {
    const int64_t ff = m.n_shared * m.n_ff_expert;
    e.shared_gate = t.row_slice(p + "ffn_gate_shexp.weight", c.n_embd, ff, plan.shared_rows);
    e.shared_up = t.row_slice(p + "ffn_up_shexp.weight", c.n_embd, ff, plan.shared_rows);
    e.shared_down = t.col_slice(p + "ffn_down_shexp.weight", ff, c.n_embd, plan.shared_rows);
  }
}

}  // namespace

ModelWeights ModelWeights::map(const gguf::File& file, const ModelConfig& c, const RankPlan& plan,
                               bool copy_vectors) {
  plan.validate(c);
  ModelWeights w;
  w.own_ffn_share = double(plan.ff_rows.size()) / double(plan.ff_held.size());
  w.own_vocab_share = double(plan.vocab_rows.size()) / double(plan.vocab_held.size());
  const TensorMapper t(file, copy_vectors ? &w.derived : nullptr);
  w.token_embd = t.matrix("token_embd.weight", c.n_embd, c.n_vocab);
  if (c.rope.has_freq_factors) w.rope_freq_factors = t.vector("rope_freqs.weight", c.rope.dims / 2);

  const int64_t v_head = c.latent_attention() ? c.attention.latent.v_dim : c.head_dim_v;
  const Range o_cols = scaled(plan.heads, v_head);
  for (int64_t l = plan.layers.begin; l < plan.layers.end; ++l) {
    const std::string p = fmt::format("blk.{}.", l);
    LayerWeights L;
    L.attn_norm = t.vector(p + "attn_norm.weight", c.n_embd);
    if (c.latent_attention()) {
      map_latent_attention(t, p, c, plan, w, L);
    } else {
      const Range q_rows = scaled(plan.heads, c.head_dim_k);
      const Range k_rows = scaled(plan.kv_heads, c.head_dim_k);
      const Range v_rows = scaled(plan.kv_heads, c.head_dim_v);
      L.wq = t.row_slice(p + "attn_q.weight", c.n_embd, c.q_dim(), q_rows);
      L.wk = t.row_slice(p + "attn_k.weight", c.n_embd, c.kv_dim_k(), k_rows);
      L.wv = t.row_slice(p + "attn_v.weight", c.n_embd, c.kv_dim_v(), v_rows);
      if (c.attention.qkv_bias) {
        L.bq = t.vector(p + "attn_q.bias", c.q_dim(), q_rows);
        L.bk = t.vector(p + "attn_k.bias", c.kv_dim_k(), k_rows);
        L.bv = t.vector(p + "attn_v.bias", c.kv_dim_v(), v_rows);
      }
      if (c.attention.qk_norm) {
        L.q_norm = t.vector(p + "attn_q_norm.weight", c.head_dim_k);
        L.k_norm = t.vector(p + "attn_k_norm.weight", c.head_dim_k);
      }
    }
    L.wo = t.col_slice(p + "attn_output.weight", c.n_head * v_head, c.n_embd, o_cols);
    L.ffn_norm = t.vector(p + "ffn_norm.weight", c.n_embd);
    if (c.layer_has_experts(l)) {
      map_experts(t, p, c, plan, L);
    } else {
      L.w_gate = t.row_slice(p + "ffn_gate.weight", c.n_embd, c.n_ff, plan.ff_held);
      L.w_up = t.row_slice(p + "ffn_up.weight", c.n_embd, c.n_ff, plan.ff_held);
      L.w_down = t.col_slice(p + "ffn_down.weight", c.n_ff, c.n_embd, plan.ff_rows);
    }
    w.layers.push_back(std::move(L));
  }
  if (plan.last_stage(c)) {
    w.output_norm = t.vector("output_norm.weight", c.n_embd);
    const std::string out = c.tied_output ? "token_embd.weight" : "output.weight";
    w.output = t.row_slice(out, c.n_embd, c.n_vocab, plan.vocab_held);
  }
  return w;
}

void ModelWeights::for_each_matrix(int64_t tokens,
                                   const std::function<void(const MatrixView&, double share, bool routed)>& fn) const {
  auto visit = [&](const MatrixView& m, double share, bool routed = false) {
    if (m.data) fn(m, share, routed);
  };
  for (const auto& L : layers) {
    for (const MatrixView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_down, &L.latent.wq_a, &L.latent.wq,
                                &L.latent.wkv_a, &L.experts.router, &L.experts.shared_gate, &L.experts.shared_up,
                                &L.experts.shared_down})
      visit(*m, 1.0);
    visit(L.w_gate, own_ffn_share);
    visit(L.w_up, own_ffn_share);
    for (const auto* heads : {&L.latent.k_b, &L.latent.v_b})
      for (const auto& m : *heads) visit(m, 1.0);
    const ExpertWeights& e = L.experts;
    if (!e.gate.all.data) continue;
    // The router has a row per expert of the model, held here or not.
    const double unused = 1.0 - double(e.n_used) / double(e.router.rows);
    const double share = 1.0 - std::pow(unused, double(std::max<int64_t>(tokens, 1)));
    for (const ExpertStack* s : {&e.gate, &e.up, &e.down}) {
      MatrixView held = s->expert(s->first);
      held.rows *= s->count;
      visit(held, share, true);
    }
  }
  visit(output, own_vocab_share);
}

size_t ModelWeights::matrix_bytes_per_token() const {
  double n = 0;
  for_each_matrix(1, [&](const MatrixView& m, double share, bool) { n += share * double(matrix_bytes(m)); });
  return size_t(std::llround(n));
}

size_t ModelWeights::matrix_bytes_resident() const {
  size_t n = 0;
  for_each_matrix(1, [&](const MatrixView& m, double, bool) { n += matrix_bytes(m); });
  return n;
}

void ModelWeights::release_unread_file_pages(const gguf::File& file) const {
  if (!file.mapped()) return;
  const auto page = uintptr_t(sysconf(_SC_PAGESIZE));
  const auto file_begin = reinterpret_cast<uintptr_t>(file.bytes()), file_end = file_begin + file.file_size();
  // The page ranges still read from the file, sorted.
  std::vector<std::pair<uintptr_t, uintptr_t>> kept;
  const auto keep = [&](const MatrixView& m) {
    const auto p = reinterpret_cast<uintptr_t>(m.data);
    if (!m.data || m.rows <= 0 || p < file_begin || p >= file_end) return;
    const uintptr_t end = p + size_t(m.rows - 1) * m.row_stride + row_bytes(m.type, m.cols);
    kept.emplace_back(p & ~(page - 1), (end + page - 1) & ~(page - 1));
  };
  keep(token_embd);
  keep(output);
  for (const auto& L : layers) {
    for (const MatrixView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.latent.wq_a,
                                &L.latent.wq, &L.latent.wkv_a, &L.experts.router, &L.experts.shared_gate,
                                &L.experts.shared_up, &L.experts.shared_down, &L.experts.gate.all,
                                &L.experts.up.all, &L.experts.down.all})
      keep(*m);
    for (const auto* heads : {&L.latent.k_b, &L.latent.v_b})
      for (const auto& m : *heads) keep(m);
  }
  std::sort(kept.begin(), kept.end());
  uintptr_t at = file_begin & ~(page - 1);
  const auto release_to = [&](uintptr_t end) {
    if (end > at) madvise(reinterpret_cast<void*>(at), end - at, MADV_DONTNEED);
  };
  for (const auto& [lo, hi] : kept) {
    release_to(lo);
    at = std::max(at, hi);
  }
  release_to((file_end + page - 1) & ~(page - 1));
}

void ModelWeights::read_into_memory(const gguf::File& file) {
  if (!file.mapped()) return;
  const FileReader reader(file);
  const auto in_file = [&](const MatrixView& m) { return m.rows > 0 && reader.holds(m.data); };
  HugePageArena arena;  // the copies back to back on 2 MiB pages
  // The rows of `parts` (same type and columns) back to back in a new buffer.
  const auto copy_rows = [&](const std::vector<MatrixView>& parts) {
    const size_t row = row_bytes(parts[0].type, parts[0].cols);
    size_t bytes = 0;
    for (const MatrixView& m : parts) bytes += row * size_t(m.rows);
    std::shared_ptr<uint8_t[]> copy = arena.allocate(bytes);
    uint8_t* to = copy.get();
    for (const MatrixView& m : parts) {
      if (m.row_stride == row) {
        reader.copy(to, m.data, row * size_t(m.rows));
        to += row * size_t(m.rows);
      } else {
        for (int64_t r = 0; r < m.rows; ++r, to += row) reader.copy(to, m.row(r), row);
      }
    }
    uint8_t* data = copy.get();
    packed.push_back({std::move(copy), bytes});
    return data;
  };
  const auto own_matrix = [&](MatrixView& m) {
    if (!in_file(m)) return;
    m.data = copy_rows({m});
    m.row_stride = row_bytes(m.type, m.cols);
  };
  // An expert stack keeps only its experts' held rows, back to back.
  const auto own_stack = [&](ExpertStack& s) {
    if (!in_file(s.all)) return;
    std::vector<MatrixView> experts;
    for (int64_t e = s.first; e < s.first + s.count; ++e) experts.push_back(s.expert(e));
    s.hold_back_to_back(copy_rows(experts));
  };
  // A layer's per-head matrices (latent attention) in one buffer, not a
  // mapping of their own each.
  const auto own_heads = [&](std::vector<MatrixView>& heads) {
    if (heads.empty() || !std::all_of(heads.begin(), heads.end(), in_file)) {
      for (auto& m : heads) own_matrix(m);
      return;
    }
    uint8_t* at = copy_rows(heads);
    for (auto& m : heads) {
      m.data = at;
      m.row_stride = row_bytes(m.type, m.cols);
      at += m.row_stride * size_t(m.rows);
    }
  };
  const bool embedding_is_output = output.data && output.data == token_embd.data && output.rows == token_embd.rows &&
                                   output.row_stride == token_embd.row_stride;
  for (auto& L : layers) {
    for (MatrixView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.latent.wq_a, &L.latent.wq,
                          &L.latent.wkv_a, &L.experts.router, &L.experts.shared_gate, &L.experts.shared_up,
                          &L.experts.shared_down})
      own_matrix(*m);
    for (auto* heads : {&L.latent.k_b, &L.latent.v_b}) own_heads(*heads);
    for (ExpertStack* s : {&L.experts.gate, &L.experts.up, &L.experts.down}) own_stack(*s);
  }
  own_matrix(output);
  if (embedding_is_output) token_embd = output;
}

size_t ModelWeights::owned_bytes() const {
  size_t n = 0;
  for (const auto& c : packed) n += c.bytes;
  for (const auto& d : derived) n += d.size() * sizeof(float);
  return n;
}

void ModelWeights::pack_column_slices() {
  auto pack = [&](MatrixView& m) {
    const size_t row = row_bytes(m.type, m.cols);
    if (!m.data || m.rows == 0 || row == m.row_stride) return;
    std::shared_ptr<uint8_t[]> copy = alloc_huge_page_buffer(row * size_t(m.rows));
    for (int64_t r = 0; r < m.rows; ++r) std::memcpy(copy.get() + size_t(r) * row, m.row(r), row);
    m.data = copy.get();
    m.row_stride = row;
    packed.push_back({std::move(copy), row * size_t(m.rows)});
  };
  for (auto& L : layers) {
    pack(L.wo);
    pack(L.w_down);
    pack(L.experts.shared_down);
    pack(L.experts.down.all);  // whole rows of its experts: one stretch per row
  }
}

void ModelWeights::pack_panels(const gguf::File& file, bool experts) {
  const FileReader reader(file);
  std::vector<uint8_t> rows;  // a slice read from the file
  HugePageArena arena;  // the repacked matrices back to back on 2 MiB pages
  // m as panels at `out`, in slices of ~16 MiB read from the file (not its
  // mapping) into one buffer, so a matrix is never resident twice.
  const auto repack = [&](const MatrixView& m, uint8_t* out) {
    const int64_t slice = std::max<int64_t>(16, int64_t((16u << 20) / m.row_stride) / 16 * 16);
    for (int64_t r = 0; r < m.rows; r += slice) {
      MatrixView part = m;
      part.data = m.row(r);
      part.rows = std::min(slice, m.rows - r);
      if (reader.holds(part.data)) {
        rows.resize(size_t(part.rows) * m.row_stride);
        reader.copy(rows.data(), part.data, rows.size());
        part.data = rows.data();
      }
      repack_panels(part, out + size_t(r) * m.row_stride);
    }
  };
  // Takes the panels of what was at `old` (a copy owned here is freed).
  const auto own = [&](const void* old, std::shared_ptr<uint8_t[]> panels, size_t bytes) {
    const auto owned = std::find_if(packed.begin(), packed.end(), [&](const OwnedCopy& p) { return p.data.get() == old; });
    if (owned != packed.end()) packed.erase(owned);
    packed.push_back({std::move(panels), bytes});
  };
  auto pack = [&](MatrixView& m) {
    if (!m.data || !panels_pay(m)) return;
    const size_t bytes = m.row_stride * size_t(m.rows);
    std::shared_ptr<uint8_t[]> copy = arena.allocate(bytes);
    repack(m, copy.get());
    m.layout = WeightLayout::Panels16;
    own(m.data, copy, bytes);
    m.data = copy.get();
  };
  // Each held expert's rows (a tensor-parallel rank's share of each, or
  // every row) repacked in turn: the stack becomes its experts back to back,
  // as read_into_memory compacts one.
  const auto pack_stack = [&](ExpertStack& s) {
    if (!s.all.data || s.count == 0 || !panels_pay(s.expert(s.first))) return;
    const size_t expert_bytes = s.all.row_stride * size_t(s.rows_per_expert), bytes = expert_bytes * size_t(s.count);
    std::shared_ptr<uint8_t[]> copy = arena.allocate(bytes);
    for (int64_t e = 0; e < s.count; ++e) repack(s.expert(s.first + e), copy.get() + size_t(e) * expert_bytes);
    own(s.all.data, copy, bytes);
    s.hold_back_to_back(copy.get());
    s.all.layout = WeightLayout::Panels16;
  };
  for (auto& L : layers) {
    for (MatrixView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down, &L.latent.wq_a, &L.latent.wq,
                          &L.latent.wkv_a, &L.experts.shared_gate, &L.experts.shared_up, &L.experts.shared_down})
      pack(*m);
    if (experts)
      for (ExpertStack* s : {&L.experts.gate, &L.experts.up, &L.experts.down}) pack_stack(*s);
  }
  // A tied output that is the whole embedding matrix: the lookups read the
  // repacked copy too, or every new token would fault the released file
  // pages back in (the process grew by the embedding's size over a session).
  const bool embedding_is_output = output.data && output.data == token_embd.data && output.rows == token_embd.rows &&
                                   output.row_stride == token_embd.row_stride;
  pack(output);
  if (embedding_is_output && output.layout == WeightLayout::Panels16) token_embd = output;
}

}  // namespace shardlm
