// Streaming GGUF v3 writer. The header is written once every tensor is
// declared; data then arrives in declaration order, in as many pieces as the
// caller likes, and goes straight to disk. The file appears under its final
// name only after finish() succeeded.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fmt/format.h>
#include <unordered_set>

#include <unistd.h>

#include "gguf/gguf.h"

namespace shardlm::gguf {

namespace {
constexpr size_t kBufferBytes = size_t(1) << 20;
}  // namespace

struct Writer::Impl {
  struct Pending {
    std::string name;
    DType type;
    std::vector<int64_t> shape;
    uint64_t offset = 0;
    uint64_t n_bytes = 0;
  };

  std::string path, tmp_path;
  std::vector<std::pair<std::string, Value>> kv;
  std::vector<Pending> tensors;
  std::unordered_set<std::string> tensor_names;
  std::FILE* out = nullptr;
  std::vector<char> buffer;
  uint64_t alignment = kDefaultAlignment;
  size_t current = 0;        // tensor receiving data
  uint64_t current_done = 0;  // bytes of it already written
  bool began = false, finished = false;

  [[noreturn]] void fail(const std::string& what) const { throw Error(fmt::format("{}: {}", path, what)); }

  void bytes(const void* p, size_t n) {
    if (n && std::fwrite(p, 1, n, out) != n) fail(fmt::format("write failed: {}", std::strerror(errno)));
  }
  template <class T>
  void scalar(T v) { bytes(&v, sizeof v); }
  void str(const std::string& s) {
    scalar<uint64_t>(s.size());
    bytes(s.data(), s.size());
  }
  void pad_to_alignment(uint64_t written) {
    static const char zeros[256] = {};
    uint64_t pad = (alignment - written % alignment) % alignment;
    while (pad) {
      const size_t n = size_t(std::min<uint64_t>(pad, sizeof zeros));
      bytes(zeros, n);
      pad -= n;
    }
  }

  // Checked when set, so a bad value fails before any byte is written.
  void check(const Value& v, const std::string& key) const {
    const auto* a = std::get_if<std::shared_ptr<Array>>(&v);
    if (!a) return;
    if (!*a) fail(fmt::format("metadata key '{}': null array", key));
    for (const auto& item : (*a)->items) {
      if (type_of(item) != (*a)->type)
        fail(fmt::format("metadata key '{}': array of {} holds a {}", key, value_type_name((*a)->type),
                         value_type_name(type_of(item))));
      check(item, key);
    }
  }

  void value(const Value& v, const std::string& key) {
    std::visit(
        [&](const auto& x) {
          using T = std::decay_t<decltype(x)>;
          if constexpr (std::is_same_v<T, std::string>) {
            str(x);
          } else if constexpr (std::is_same_v<T, std::shared_ptr<Array>>) {
            scalar<uint32_t>(uint32_t(x->type));
            scalar<uint64_t>(x->items.size());
            for (const auto& item : x->items) value(item, key);
          } else if constexpr (std::is_same_v<T, bool>) {
            scalar<uint8_t>(x ? 1 : 0);
          } else {
            scalar<T>(x);
          }
        },
        v);
  }

  // Bytes from the file start, tracked to place the data section.
  uint64_t tell() {
    const long p = std::ftell(out);
    if (p < 0) fail(fmt::format("ftell failed: {}", std::strerror(errno)));
    return uint64_t(p);
  }

  void advance_past_finished_tensors() {
    while (current < tensors.size() && current_done == tensors[current].n_bytes) {
      pad_to_alignment(tensors[current].offset + tensors[current].n_bytes);
      ++current;
      current_done = 0;
    }
  }

  void close_and_discard() {
    if (out) std::fclose(out);
    out = nullptr;
    std::remove(tmp_path.c_str());
  }
};

Writer::Writer(std::string path) : impl_(std::make_unique<Impl>()) {
  impl_->path = std::move(path);
  impl_->tmp_path = impl_->path + ".tmp";
}

Writer::~Writer() {
  if (impl_ && !impl_->finished) impl_->close_and_discard();
}

void Writer::set(std::string key, Value value) {
  auto& m = *impl_;
  if (m.began) m.fail(fmt::format("metadata key '{}' set after begin_data()", key));
  if (key.empty()) m.fail("empty metadata key");
  m.check(value, key);
  if (key == "general.alignment") {
    const auto* a = std::get_if<uint32_t>(&value);
    if (!a || *a == 0 || (*a & (*a - 1)) != 0) m.fail("general.alignment must be a u32 power of two");
    m.alignment = *a;
  }
  for (auto& [k, v] : m.kv)
    if (k == key) {
      v = std::move(value);
      return;
    }
  m.kv.emplace_back(std::move(key), std::move(value));
}

void Writer::add_tensor(std::string name, DType type, std::vector<int64_t> shape) {
  auto& m = *impl_;
  if (m.began) m.fail(fmt::format("tensor '{}' added after begin_data()", name));
  if (name.empty() || name.size() > 64) m.fail(fmt::format("tensor name '{}' must be 1..64 bytes", name));
  if (!m.tensor_names.insert(name).second) m.fail(fmt::format("duplicate tensor '{}'", name));
  if (shape.empty() || shape.size() > 4) m.fail(fmt::format("tensor '{}' must have 1..4 dimensions", name));
  if (!dtype_traits(uint32_t(type))) m.fail(fmt::format("tensor '{}': unknown type", name));
  uint64_t rows = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 1) m.fail(fmt::format("tensor '{}': dimension {} must be >= 1", name, i));
    if (i > 0) rows *= uint64_t(shape[i]);
  }
  const auto& tr = traits(type);
  if (shape[0] % tr.block_elems != 0)
    m.fail(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size", name, shape[0], tr.name));
  Impl::Pending t{std::move(name), type, std::move(shape), 0, 0};
  t.n_bytes = rows * row_bytes(type, t.shape[0]);
  m.tensors.push_back(std::move(t));
}

void Writer::begin_data() {
  auto& m = *impl_;
  if (m.began) m.fail("begin_data() called twice");
  m.began = true;
  uint64_t offset = 0;
  for (auto& t : m.tensors) {
    t.offset = offset;
    offset += (t.n_bytes + m.alignment - 1) / m.alignment * m.alignment;
  }
  m.out = std::fopen(m.tmp_path.c_str(), "wb");
  if (!m.out) m.fail(fmt::format("cannot create {}: {}", m.tmp_path, std::strerror(errno)));
  m.buffer.resize(kBufferBytes);
  std::setvbuf(m.out, m.buffer.data(), _IOFBF, m.buffer.size());

  m.bytes("GGUF", 4);
  m.scalar<uint32_t>(3);
  m.scalar<uint64_t>(m.tensors.size());
  m.scalar<uint64_t>(m.kv.size());
  for (const auto& [k, v] : m.kv) {
    m.str(k);
    m.scalar<uint32_t>(uint32_t(type_of(v)));
    m.value(v, k);
  }
  for (const auto& t : m.tensors) {
    m.str(t.name);
    m.scalar<uint32_t>(uint32_t(t.shape.size()));
    for (int64_t d : t.shape) m.scalar<uint64_t>(uint64_t(d));
    m.scalar<uint32_t>(uint32_t(t.type));
    m.scalar<uint64_t>(t.offset);
  }
  m.pad_to_alignment(m.tell());
  m.advance_past_finished_tensors();
}

void Writer::write_tensor_data(std::string_view name, const void* data, size_t n_bytes) {
  auto& m = *impl_;
  if (!m.began || m.finished) m.fail(fmt::format("write_tensor_data('{}') outside begin_data()/finish()", name));
  if (m.current >= m.tensors.size()) m.fail(fmt::format("data for '{}' but every tensor is complete", name));
  auto& t = m.tensors[m.current];
  if (t.name != name) m.fail(fmt::format("data for '{}' while tensor '{}' is incomplete", name, t.name));
  if (n_bytes > t.n_bytes - m.current_done)
    m.fail(fmt::format("tensor '{}': {} bytes written, it holds {}", t.name, m.current_done + n_bytes, t.n_bytes));
  m.bytes(data, n_bytes);
  m.current_done += n_bytes;
  m.advance_past_finished_tensors();
}

void Writer::skip_remaining_data() {
  auto& m = *impl_;
  if (!m.began || m.finished) m.fail("skip_remaining_data() outside begin_data()/finish()");
  if (m.current >= m.tensors.size()) return;
  const uint64_t data_start = m.tell() - m.tensors[m.current].offset - m.current_done;
  const auto& last = m.tensors.back();
  const uint64_t end = data_start + (last.offset + last.n_bytes + m.alignment - 1) / m.alignment * m.alignment;
  if (std::fflush(m.out) != 0 || ftruncate(fileno(m.out), off_t(end)) != 0 || std::fseek(m.out, 0, SEEK_END) != 0)
    m.fail(fmt::format("cannot extend {}: {}", m.tmp_path, std::strerror(errno)));
  m.current = m.tensors.size();
  m.current_done = 0;
}

void Writer::finish() {
  auto& m = *impl_;
  if (!m.began) begin_data();
  if (m.finished) return;
  if (m.current < m.tensors.size())
    m.fail(fmt::format("finish() before tensor '{}' was fully written ({} of {} bytes)", m.tensors[m.current].name,
                       m.current_done, m.tensors[m.current].n_bytes));
  const bool flushed = std::fflush(m.out) == 0;
  const bool closed = std::fclose(m.out) == 0;
  m.out = nullptr;
  if (!flushed || !closed) {
    m.close_and_discard();
    m.fail(fmt::format("write failed: {}", std::strerror(errno)));
  }
  if (std::rename(m.tmp_path.c_str(), m.path.c_str()) != 0) {
    const int e = errno;
    m.close_and_discard();
    m.fail(fmt::format("cannot rename {}: {}", m.tmp_path, std::strerror(e)));
  }
  m.finished = true;
}

}  // namespace shardlm::gguf
