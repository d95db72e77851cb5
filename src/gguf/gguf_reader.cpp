// Validating GGUF parser. Every count and length read from the file is checked
// against the bytes that remain before anything is allocated for it, so a
// lying header costs at most a few times the file's own size.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "gguf/gguf.h"

namespace shardlm::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian u32
constexpr int kMaxArrayDepth = 8;
// Total array elements over the whole header. Real vocabularies hold well under
// a million entries per array; the cap bounds memory for a hostile file.
constexpr uint64_t kMaxArrayElements = uint64_t(1) << 25;
constexpr uint64_t kMaxTensorName = 64;  // GGUF spec: names are at most 64 bytes

// Smallest encoding of one item of each type, used to bound counts.
uint64_t min_value_bytes(ValueType t) {
  switch (t) {
    case ValueType::UINT8: case ValueType::INT8: case ValueType::BOOL: return 1;
    case ValueType::UINT16: case ValueType::INT16: return 2;
    case ValueType::UINT32: case ValueType::INT32: case ValueType::FLOAT32: return 4;
    case ValueType::UINT64: case ValueType::INT64: case ValueType::FLOAT64: return 8;
    case ValueType::STRING: return 8;      // length only
    case ValueType::ARRAY: return 4 + 8;  // element type + count
  }
  return 1;
}

bool known_value_type(uint32_t t) { return t <= uint32_t(ValueType::FLOAT64); }

}  // namespace

class Parser {
 public:
  Parser(File& f, const uint8_t* data, size_t size) : f_(f), p_(data), size_(size) {}

  void run() {
    const uint64_t magic_pos = pos_;
    const uint32_t magic = u32("magic");
    if (magic != kMagic) fail("magic", magic_pos, "not a GGUF file (bad magic)");
    const uint64_t version_pos = pos_;
    const uint32_t version = u32("version");
    if (version == 1) fail("version", version_pos, "unsupported version 1 (GGUF v1 is obsolete; reconvert the model)");
    if (version == 0x02000000 || version == 0x03000000)
      fail("version", version_pos, "big-endian GGUF is not supported");
    if (version != 2 && version != 3) fail("version", version_pos, fmt::format("unsupported version {}", version));
    f_.version_ = version;

    const uint64_t nt_pos = pos_;
    const uint64_t n_tensors = u64("tensor count");
    const uint64_t nkv_pos = pos_;
    const uint64_t n_kv = u64("metadata kv count");
    // Each kv needs ≥ 13 bytes (key length, type, 1-byte value) and each tensor
    // info ≥ 24 bytes (name length, n_dims, type, offset).
    if (n_kv > remaining() / 13)
      fail("metadata kv count", nkv_pos,
           fmt::format("{} entries cannot fit in the remaining {} bytes", n_kv, remaining()));
    if (n_tensors > remaining() / 24)
      fail("tensor count", nt_pos,
           fmt::format("{} tensors cannot fit in the remaining {} bytes", n_tensors, remaining()));

    read_metadata(n_kv);
    read_tensor_infos(n_tensors);
    place_tensors();
  }

 private:
  File& f_;
  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t array_elements_ = 0;
  std::string field_;  // prefix naming the kv / tensor being read, for errors
  std::vector<uint64_t> tensor_offset_pos_;

  [[noreturn]] void fail(const std::string& field, uint64_t at, const std::string& what) const {
    throw Error(fmt::format("{}: {}{} at offset {}: {}", f_.path_, field_, field, at, what));
  }
  uint64_t remaining() const { return size_ - pos_; }

  void need(uint64_t n, const char* field) const {
    if (n > remaining()) fail(field, pos_, fmt::format("truncated: needs {} bytes, {} left", n, remaining()));
  }
  template <class T>
  T scalar(const char* field) {
    need(sizeof(T), field);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint32_t u32(const char* field) { return scalar<uint32_t>(field); }
  uint64_t u64(const char* field) { return scalar<uint64_t>(field); }

  std::string str(const char* field) {
    const uint64_t at = pos_;
    const uint64_t len = u64(field);
    if (len > remaining()) fail(field, at, fmt::format("string length {} exceeds the {} bytes left", len, remaining()));
    std::string s(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return s;
  }

  Value value(ValueType t, int depth) {
    switch (t) {
      case ValueType::UINT8: return scalar<uint8_t>("value");
      case ValueType::INT8: return scalar<int8_t>("value");
      case ValueType::UINT16: return scalar<uint16_t>("value");
      case ValueType::INT16: return scalar<int16_t>("value");
      case ValueType::UINT32: return scalar<uint32_t>("value");
      case ValueType::INT32: return scalar<int32_t>("value");
      case ValueType::FLOAT32: return scalar<float>("value");
      case ValueType::UINT64: return scalar<uint64_t>("value");
      case ValueType::INT64: return scalar<int64_t>("value");
      case ValueType::FLOAT64: return scalar<double>("value");
      case ValueType::BOOL: {
        const uint64_t at = pos_;
        const uint8_t b = scalar<uint8_t>("value");
        if (b > 1) fail("value", at, fmt::format("bool must be 0 or 1, found {}", b));
        return b != 0;
      }
      case ValueType::STRING: return str("value");
      case ValueType::ARRAY: return array(depth + 1);
    }
    fail("value", pos_, "unknown value type");
  }

  Value array(int depth) {
    const uint64_t type_pos = pos_;
    if (depth > kMaxArrayDepth) fail("array", type_pos, fmt::format("arrays nested deeper than {}", kMaxArrayDepth));
    const uint32_t type = u32("array type");
    if (!known_value_type(type)) fail("array type", type_pos, fmt::format("unknown value type {}", type));
    const uint64_t count_pos = pos_;
    const uint64_t count = u64("array count");
    const auto elem = ValueType(type);
    if (count > remaining() / min_value_bytes(elem))
      fail("array count", count_pos,
           fmt::format("{} elements of {} cannot fit in the remaining {} bytes", count, value_type_name(elem),
                       remaining()));
    array_elements_ += count;
    if (array_elements_ > kMaxArrayElements)
      fail("array count", count_pos, fmt::format("more than {} array elements in total", kMaxArrayElements));
    auto a = std::make_shared<Array>();
    a->type = elem;
    a->items.reserve(count);
    for (uint64_t i = 0; i < count; ++i) a->items.push_back(value(elem, depth));
    return a;
  }

  void read_metadata(uint64_t n_kv) {
    std::unordered_set<std::string> seen;
    f_.kv_.reserve(n_kv);
    for (uint64_t i = 0; i < n_kv; ++i) {
      field_ = "metadata kv " + std::to_string(i) + " ";
      const uint64_t key_pos = pos_;
      std::string key = str("key");
      if (key.empty()) fail("key", key_pos, "empty key");
      field_ = "metadata kv " + std::to_string(i) + " '" + key + "' ";
      if (!seen.insert(key).second) fail("key", key_pos, "duplicate key");
      const uint64_t type_pos = pos_;
      const uint32_t type = u32("type");
      if (!known_value_type(type)) fail("type", type_pos, fmt::format("unknown value type {}", type));
      const uint64_t value_pos = pos_;
      Value v = value(ValueType(type), 0);
      if (key == "general.alignment") set_alignment(v, value_pos);
      f_.kv_.emplace_back(std::move(key), std::move(v));
    }
    field_.clear();
  }

  void set_alignment(const Value& v, uint64_t at) {
    const auto* a = std::get_if<uint32_t>(&v);
    if (!a) fail("value", at, fmt::format("general.alignment must be u32, found {}", value_type_name(type_of(v))));
    if (*a == 0 || (*a & (*a - 1)) != 0)
      fail("value", at, fmt::format("general.alignment must be a nonzero power of two, found {}", *a));
    f_.alignment_ = *a;
  }

  void read_tensor_infos(uint64_t n_tensors) {
    std::unordered_set<std::string> seen;
    f_.tensors_.reserve(n_tensors);
    tensor_offset_pos_.reserve(n_tensors);
    for (uint64_t i = 0; i < n_tensors; ++i) {
      field_ = "tensor " + std::to_string(i) + " ";
      TensorInfo t;
      const uint64_t name_pos = pos_;
      t.name = str("name");
      if (t.name.size() > kMaxTensorName)
        fail("name", name_pos, fmt::format("name is {} bytes, the limit is 64", t.name.size()));
      field_ = "tensor " + std::to_string(i) + " '" + t.name + "' ";
      if (!seen.insert(t.name).second) fail("name", name_pos, "duplicate tensor name");
      read_dims(t);
      const uint64_t type_pos = pos_;
      const uint32_t type = u32("type");
      const auto tr = dtype_traits(type);
      if (!tr) fail("type", type_pos, fmt::format("unknown tensor type id {}", type));
      t.type = DType(type);
      if (t.ne[0] % tr->block_elems != 0)
        fail("type", type_pos,
             fmt::format("row length {} is not a multiple of the {} block size {}", t.ne[0], tr->name,
                         tr->block_elems));
      // n_elements fits in int64 (read_dims), so rows * row bytes fits in 128 bits.
      // Blocks ≤ elements < 2^63 and block bytes < 2^16, so this cannot wrap.
      const unsigned __int128 bytes =
          (unsigned __int128)(uint64_t(t.n_elements() / tr->block_elems)) * tr->block_bytes;
      if (bytes > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("type", type_pos, fmt::format("byte size of {} {} overflows", t.shape_string(), tr->name));
      t.n_bytes = uint64_t(bytes);
      tensor_offset_pos_.push_back(pos_);
      t.offset = u64("offset");
      f_.tensors_.push_back(std::move(t));
    }
    field_.clear();
  }

  void read_dims(TensorInfo& t) {
    const uint64_t nd_pos = pos_;
    t.n_dims = u32("n_dims");
    if (t.n_dims > 4) fail("n_dims", nd_pos, fmt::format("{} dimensions, at most 4 are supported", t.n_dims));
    const uint64_t dims_pos = pos_;
    int64_t elements = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
      const uint64_t dim = u64("dims");
      if (dim > uint64_t(std::numeric_limits<int64_t>::max()))
        fail("dims", dims_pos, fmt::format("dim {} = {} is out of range", d, dim));
      t.ne[d] = int64_t(dim);
      if (dim != 0 && elements > std::numeric_limits<int64_t>::max() / int64_t(dim))
        fail("dims", dims_pos, fmt::format("element count of {} overflows int64", t.shape_string()));
      elements *= int64_t(dim);
    }
  }

  void place_tensors() {
    const uint64_t header_end = pos_;
    const uint64_t align = f_.alignment_;
    if (header_end > std::numeric_limits<uint64_t>::max() - align) fail("data offset", header_end, "overflows");
    f_.data_offset_ = (header_end + align - 1) / align * align;
    const uint64_t data_size = f_.data_offset_ <= size_ ? size_ - f_.data_offset_ : 0;
    if (f_.data_offset_ > size_ && !f_.tensors_.empty() && std::any_of(f_.tensors_.begin(), f_.tensors_.end(), [](auto& t) { return t.n_bytes > 0; }))
      fail("data section", header_end,
           fmt::format("file ends before the aligned data section starts at {}", f_.data_offset_));

    for (size_t i = 0; i < f_.tensors_.size(); ++i) {
      TensorInfo& t = f_.tensors_[i];
      field_ = "tensor " + std::to_string(i) + " '" + t.name + "' ";
      const uint64_t at = tensor_offset_pos_[i];
      if (t.offset % align != 0)
        fail("offset", at, fmt::format("data offset {} is not a multiple of the alignment {}", t.offset, align));
      if (t.offset > data_size || t.n_bytes > data_size - t.offset)
        fail("offset", at,
             fmt::format("data [{}, +{}) extends past the end of the data section ({} bytes)", t.offset, t.n_bytes,
                         data_size));
      t.data = t.n_bytes ? f_.base_ + f_.data_offset_ + t.offset : nullptr;
    }
    field_.clear();

    std::vector<size_t> order(f_.tensors_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return f_.tensors_[a].offset < f_.tensors_[b].offset; });
    const TensorInfo* prev = nullptr;
    for (size_t k = 0; k < order.size(); ++k) {
      const TensorInfo& t = f_.tensors_[order[k]];
      if (t.n_bytes == 0) continue;
      if (prev && prev->offset + prev->n_bytes > t.offset) {
        field_ = "tensor " + std::to_string(order[k]) + " '" + t.name + "' ";
        fail("offset", tensor_offset_pos_[order[k]], fmt::format("data overlaps tensor '{}'", prev->name));
      }
      prev = &t;
    }
    field_.clear();
  }
};

std::unique_ptr<File> File::parse(const uint8_t* data, size_t size, std::string name) {
  std::unique_ptr<File> f(new File());
  f->path_ = std::move(name);
  f->base_ = data;
  f->size_ = size;
  Parser(*f, data, size).run();
  return f;
}

std::unique_ptr<File> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(e)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file", path));
  }
  const size_t size = size_t(st.st_size);
  if (size == 0) {
    ::close(fd);
    throw Error(fmt::format("{}: magic at offset 0: empty file", path));
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (map == MAP_FAILED) throw Error(fmt::format("{}: cannot mmap: {}", path, std::strerror(e)));

  std::unique_ptr<File> f(new File());
  f->path_ = path;
  f->base_ = static_cast<const uint8_t*>(map);
  f->size_ = size;
  f->map_ = map;  // owned from here: the destructor unmaps even if parsing throws
  Parser(*f, f->base_, size).run();
  return f;
}

File::~File() {
  if (map_) ::munmap(map_, size_);
}

}  // namespace shardlm::gguf
