#include "cluster/shard.h"

#include <fmt/format.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>

#include "core/error.h"
#include "gguf/gguf.h"

namespace shardlm::cluster {
namespace {

Range scaled(Range r, int64_t k) { return {r.begin * k, r.end * k}; }

struct Collector {
  const gguf::File& file;
  std::vector<ByteRange> out;

  uint64_t start(const gguf::TensorInfo& t) const { return file.data_offset() + t.offset; }
  void whole(const gguf::TensorInfo& t) { out.push_back({start(t), uint64_t(t.n_rows()) * t.row_size()}); }
  void rows(const gguf::TensorInfo& t, Range r) {
    out.push_back({start(t) + uint64_t(r.begin) * t.row_size(), uint64_t(r.size()) * t.row_size()});
  }
  // Columns [c.begin, c.end) of the rows `rs` (default all); ModelWeights::map checks the block alignment.
  void cols(const gguf::TensorInfo& t, Range c, Range rs = {0, -1}) {
    if (rs.end < 0) rs.end = t.n_rows();
    const uint64_t skip = row_bytes(t.type, c.begin), len = row_bytes(t.type, c.end) - skip;
    for (int64_t r = rs.begin; r < rs.end; ++r) out.push_back({start(t) + uint64_t(r) * t.row_size() + skip, len});
  }
  // Of a [cols, rows, n] expert tensor: the rows `r` of each of the experts `held`.
  void expert_rows(const gguf::TensorInfo& t, Range held, Range r) {
    for (int64_t e = held.begin; e < held.end; ++e) rows(t, {e * t.ne[1] + r.begin, e * t.ne[1] + r.end});
  }
};

// The tensors of one layer, sliced as ModelWeights::map reads them.
void layer_ranges(Collector& col, const gguf::TensorInfo& t, const std::string& part, const ModelConfig& c,
                  const RankPlan& plan) {
  const auto& lat = c.attention.latent;
  const bool latent = c.latent_attention();
  const int64_t v_head = latent ? lat.v_dim : c.head_dim_v;
  if (part == "attn_q.weight" || part == "attn_q_b.weight")
    col.rows(t, scaled(plan.heads, latent ? lat.qk_dim() : c.head_dim_k));
  else if (part == "attn_k.weight") col.rows(t, scaled(plan.kv_heads, c.head_dim_k));
  else if (part == "attn_v.weight") col.rows(t, scaled(plan.kv_heads, c.head_dim_v));
  else if (part == "attn_k_b.weight" || part == "attn_v_b.weight") col.rows(t, scaled(plan.heads, t.ne[1]));
  else if (part == "attn_kv_b.weight") col.rows(t, scaled(plan.heads, lat.qk_nope_dim + lat.v_dim));
  else if (part == "attn_output.weight") col.cols(t, scaled(plan.heads, v_head));
  else if (part == "ffn_gate.weight" || part == "ffn_up.weight") col.rows(t, plan.ff_held);
  else if (part == "ffn_down.weight") col.cols(t, plan.ff_rows);
  else if (part == "ffn_gate_exps.weight" || part == "ffn_up_exps.weight") col.expert_rows(t, plan.experts, plan.expert_rows);
  else if (part == "ffn_down_exps.weight") col.cols(t, plan.expert_rows, scaled(plan.experts, c.n_embd));
  else if (part == "ffn_gate_shexp.weight" || part == "ffn_up_shexp.weight") col.rows(t, plan.shared_rows);
  else if (part == "ffn_down_shexp.weight") col.cols(t, plan.shared_rows);
  else col.whole(t);  // norms, biases, the router, the latent's projections: small or needed whole
}

// "blk.12.attn_q.weight" → (12, "attn_q.weight"); -1 for tensors outside the layers.
std::pair<int64_t, std::string> layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return {-1, name};
  const auto dot = name.find('.', 4);
  int64_t l = -1;
  if (dot == std::string::npos || std::from_chars(name.data() + 4, name.data() + dot, l).ec != std::errc())
    return {-1, name};
  return {l, name.substr(dot + 1)};
}

}  // namespace

const uint8_t* file_bytes(const gguf::File& file) {
  if (file.tensors().empty()) throw Error(fmt::format("{}: has no tensors", file.path()));
  const auto& t = file.tensors().front();
  return t.data - (file.data_offset() + t.offset);
}

std::vector<ByteRange> shard_ranges(const gguf::File& file, const ModelConfig& c, const RankPlan& plan) {
  Collector col{file, {}};
  col.out.push_back({0, file.data_offset()});
  const bool first = plan.first_stage(), last = plan.last_stage(c);
  for (const auto& t : file.tensors()) {
    const auto [layer, part] = layer_of(t.name);
    if (layer >= 0) {
      if (layer < plan.layers.begin || layer >= plan.layers.end) continue;
      layer_ranges(col, t, part, c, plan);
    } else if (t.name == "token_embd.weight") {
      if (first) col.whole(t);  // the first stage embeds any token
      else if (last && c.tied_output) col.rows(t, plan.vocab_held);
    } else if (t.name == "output.weight") {
      if (last) col.rows(t, plan.vocab_held);
    } else {
      col.whole(t);
    }
  }
  auto& v = col.out;
  std::sort(v.begin(), v.end(), [](const ByteRange& a, const ByteRange& b) { return a.offset < b.offset; });
  std::vector<ByteRange> merged;
  for (const auto& r : v) {
    if (r.length == 0) continue;
    if (r.offset + r.length > file.file_size())
      throw Error(fmt::format("{}: slice [{}, +{}) is beyond the end of the file", file.path(), r.offset, r.length));
    if (!merged.empty() && r.offset <= merged.back().offset + merged.back().length)
      merged.back().length = std::max(merged.back().offset + merged.back().length, r.offset + r.length) -
                             merged.back().offset;
    else
      merged.push_back(r);
  }
  return merged;
}

uint64_t total_bytes(const std::vector<ByteRange>& ranges) {
  uint64_t n = 0;
  for (const auto& r : ranges) n += r.length;
  return n;
}

namespace {

// SHA-256 (hex) of the file size, the ranges' descriptions and their bytes.
std::string digest_of_ranges(const gguf::File& file, const std::vector<ByteRange>& ranges) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw Error("OpenSSL: SHA-256 unavailable");
  const uint64_t size = file.file_size();
  EVP_DigestUpdate(ctx.get(), &size, sizeof size);
  EVP_DigestUpdate(ctx.get(), ranges.data(), ranges.size() * sizeof(ByteRange));
  const uint8_t* base = file_bytes(file);
  for (const auto& r : ranges) EVP_DigestUpdate(ctx.get(), base + r.offset, r.length);
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(ctx.get(), md, &n);
  std::string hex;
  for (unsigned i = 0; i < n; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace

std::string shard_key(const gguf::File& file, const std::vector<ByteRange>& ranges) {
  return digest_of_ranges(file, ranges);
}

std::string model_fingerprint(const gguf::File& file) {
  constexpr uint64_t kPieces = 1024, kPieceBytes = 4096, kWhole = 4 * kPieces * kPieceBytes;
  const uint64_t size = file.file_size(), data = std::min(file.data_offset(), size), data_bytes = size - data;
  if (data_bytes <= kWhole) return digest_of_ranges(file, {{0, size}});
  std::vector<ByteRange> ranges{{0, data}};
  for (uint64_t i = 0; i < kPieces; ++i) ranges.push_back({data + data_bytes / kPieces * i, kPieceBytes});
  ranges.push_back({size - kPieceBytes, kPieceBytes});  // the very end: a download cut short and zero-filled
  return digest_of_ranges(file, ranges);
}

ShardWriter::ShardWriter(std::filesystem::path path, uint64_t file_size) : path_(std::move(path)), size_(file_size) {
  fd_ = ::open(path_.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(fmt::format("cannot create shard {}: {}", path_.string(), std::strerror(errno)));
  if (::ftruncate(fd_, off_t(file_size)) != 0)
    throw Error(fmt::format("cannot size shard {} to {} bytes: {}", path_.string(), file_size, std::strerror(errno)));
}

ShardWriter::~ShardWriter() { close(); }

void ShardWriter::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void ShardWriter::write_at(uint64_t offset, const uint8_t* data, uint64_t length) {
  if (offset > size_ || length > size_ - offset)
    throw Error(fmt::format("shard {}: bytes [{}, +{}) outside its {} bytes", path_.string(), offset, length, size_));
  for (uint64_t done = 0; done < length;) {
    const ssize_t n = ::pwrite(fd_, data + done, size_t(length - done), off_t(offset + done));
    if (n <= 0) throw Error(fmt::format("writing shard {}: {}", path_.string(), std::strerror(errno)));
    done += uint64_t(n);
  }
  received_ += length;
}

void ShardWriter::write_records(const std::vector<uint8_t>& p, const std::string& who) {
  size_t at = 0;
  while (at < p.size()) {
    uint64_t off = 0, len = 0;
    if (p.size() - at < 16) throw Error(fmt::format("{}: truncated Data record at byte {}", who, at));
    std::memcpy(&off, p.data() + at, 8);
    std::memcpy(&len, p.data() + at + 8, 8);
    at += 16;
    if (len > p.size() - at || off > size_ || len > size_ - off)
      throw Error(fmt::format("{}: Data record [{}, +{}) outside the message or the {}-byte shard", who, off, len,
                              size_));
    write_at(off, p.data() + at, len);
    at += len;
  }
}

}  // namespace shardlm::cluster
