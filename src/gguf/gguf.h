// GGUF v2/v3 files: a validated, memory-mapped reader and a streaming writer.
// Format: https://github.com/ggml-org/ggml/blob/master/docs/gguf.md
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace shardlm::gguf {

// Tensor data alignment where a file's general.alignment does not say (GGUF spec).
inline constexpr uint64_t kDefaultAlignment = 32;

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

struct Array;
// One metadata value. Arrays are shared so copying a Value stays cheap.
using Value = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool,
                           std::string, std::shared_ptr<Array>, uint64_t, int64_t, double>;
struct Array {
  ValueType type = ValueType::UINT8;  // element type (may itself be ARRAY)
  std::vector<Value> items;
};
ValueType type_of(const Value& v);

struct TensorInfo {
  std::string name;
  uint32_t n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] innermost (row length)
  DType type = DType::F32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // zero-copy view into the mapping

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_size() const { return row_bytes(type, ne[0]); }
  std::string shape_string() const;  // "[4096, 32000]"
};

class File {
 public:
  // Maps and validates the whole file. Throws Error("<path>: <field> at offset N: ...").
  static std::unique_ptr<File> open(const std::string& path);
  // Same validation over a buffer the caller owns (fuzzing, tests).
  static std::unique_ptr<File> parse(const uint8_t* data, size_t size, std::string name = "<memory>");
  ~File();

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return size_; }
  const uint8_t* bytes() const { return base_; }  // the whole file, file_size() bytes
  // Whether the bytes are this object's own mapping of the file (open), not
  // a caller's buffer (parse): only then may a user drop pages it no longer
  // reads (madvise), since they come back from the file.
  bool mapped() const { return map_ != nullptr; }

  // ---- metadata, in file order
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Typed access. Integers convert between widths when the value fits; floats
  // accept f32/f64. Missing key → nullopt; wrong type → Error naming the key.
  std::optional<uint64_t> get_u64(std::string_view key) const;
  std::optional<int64_t> get_i64(std::string_view key) const;
  std::optional<double> get_f64(std::string_view key) const;
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<float>> get_f32_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  // Required forms: missing key → Error("<path>: missing metadata key '<key>'").
  uint64_t require_u64(std::string_view key) const;
  double require_f64(std::string_view key) const;
  std::string require_string(std::string_view key) const;
  const Array& require_array(std::string_view key) const;

  // ---- tensors, in file order
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  const TensorInfo& require_tensor(std::string_view name) const;

 private:
  File() = default;
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kDefaultAlignment;
  uint64_t data_offset_ = 0;
  uint64_t size_ = 0;
  const uint8_t* base_ = nullptr;
  void* map_ = nullptr;  // non-null when this object owns an mmap
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<TensorInfo> tensors_;
  friend class Parser;
};

// Writes GGUF v3. Metadata and tensor infos are declared first; tensor data is
// then streamed in declaration order, so multi-GB files never sit in memory.
class Writer {
 public:
  explicit Writer(std::string path);
  ~Writer();
  void set(std::string key, Value value);  // replaces an existing key
  void add_tensor(std::string name, DType type, std::vector<int64_t> shape);  // shape ne0 first
  // Writes header + infos; afterwards call write_tensor_data for each tensor in order.
  void begin_data();
  void write_tensor_data(std::string_view name, const void* data, size_t n_bytes);
  // Ends the data of every tensor not yet written as zero bytes the file
  // system need not store (a hole): a header-true file of any size, e.g. for
  // planning a model without its weights. After begin_data(), before finish().
  void skip_remaining_data();
  void finish();  // checks every tensor was written; closes the file

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardlm::gguf
