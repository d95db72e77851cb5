// Metadata values and the typed accessors of gguf::File.
#include <cmath>
#include <fmt/format.h>
#include <limits>

#include "gguf/gguf.h"

namespace shardlm::gguf {

std::string_view value_type_name(ValueType t) {
  switch (t) {
    case ValueType::UINT8: return "u8";
    case ValueType::INT8: return "i8";
    case ValueType::UINT16: return "u16";
    case ValueType::INT16: return "i16";
    case ValueType::UINT32: return "u32";
    case ValueType::INT32: return "i32";
    case ValueType::FLOAT32: return "f32";
    case ValueType::BOOL: return "bool";
    case ValueType::STRING: return "string";
    case ValueType::ARRAY: return "array";
    case ValueType::UINT64: return "u64";
    case ValueType::INT64: return "i64";
    case ValueType::FLOAT64: return "f64";
  }
  return "unknown";
}

// The variant's alternatives are listed in GGUF type-id order.
ValueType type_of(const Value& v) { return ValueType(uint32_t(v.index())); }

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (uint32_t i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

namespace {

// Integer alternatives widened to a signed 128-bit value, so every range check
// below is one comparison; nullopt for non-integers.
std::optional<__int128> as_integer(const Value& v) {
  return std::visit(
      [](const auto& x) -> std::optional<__int128> {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return __int128(x);
        else return std::nullopt;
      },
      v);
}

std::optional<double> as_float(const Value& v) {
  if (auto* f = std::get_if<float>(&v)) return double(*f);
  if (auto* d = std::get_if<double>(&v)) return *d;
  if (auto i = as_integer(v)) return double(*i);
  return std::nullopt;
}

std::string describe(const Value& v) {
  if (auto* a = std::get_if<std::shared_ptr<Array>>(&v))
    return "array of " + std::string(value_type_name((*a)->type));
  return std::string(value_type_name(type_of(v)));
}

}  // namespace

const Value* File::find(std::string_view key) const {
  for (const auto& [k, v] : kv_)
    if (k == key) return &v;
  return nullptr;
}

static Error type_error(const std::string& path, std::string_view key, std::string_view want, const Value& v) {
  return Error(fmt::format("{}: metadata key '{}': expected {}, found {}", path, key, want, describe(v)));
}

std::optional<uint64_t> File::get_u64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto i = as_integer(*v);
  if (!i || *i < 0 || *i > __int128(std::numeric_limits<uint64_t>::max()))
    throw type_error(path_, key, "a non-negative integer", *v);
  return uint64_t(*i);
}

std::optional<int64_t> File::get_i64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto i = as_integer(*v);
  if (!i || *i > __int128(std::numeric_limits<int64_t>::max()))
    throw type_error(path_, key, "an integer", *v);
  return int64_t(*i);
}

std::optional<double> File::get_f64(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto f = as_float(*v);
  if (!f) throw type_error(path_, key, "a number", *v);
  return *f;
}

std::optional<bool> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* b = std::get_if<bool>(v)) return *b;
  throw type_error(path_, key, "bool", *v);
}

std::optional<std::string> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  if (auto* s = std::get_if<std::string>(v)) return *s;
  throw type_error(path_, key, "string", *v);
}

std::optional<std::vector<std::string>> File::get_string_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto* a = std::get_if<std::shared_ptr<Array>>(v);
  if (!a || (*a)->type != ValueType::STRING) throw type_error(path_, key, "array of string", *v);
  std::vector<std::string> out;
  out.reserve((*a)->items.size());
  for (const auto& item : (*a)->items) out.push_back(std::get<std::string>(item));
  return out;
}

std::optional<std::vector<float>> File::get_f32_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto* a = std::get_if<std::shared_ptr<Array>>(v);
  if (!a || ((*a)->type != ValueType::FLOAT32 && (*a)->type != ValueType::FLOAT64))
    throw type_error(path_, key, "array of f32", *v);
  std::vector<float> out;
  out.reserve((*a)->items.size());
  for (const auto& item : (*a)->items) out.push_back(float(*as_float(item)));
  return out;
}

std::optional<std::vector<int64_t>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) return std::nullopt;
  auto* a = std::get_if<std::shared_ptr<Array>>(v);
  auto t = a ? (*a)->type : ValueType::ARRAY;
  if (!a || t == ValueType::FLOAT32 || t == ValueType::FLOAT64 || t == ValueType::BOOL || t == ValueType::STRING ||
      t == ValueType::ARRAY)
    throw type_error(path_, key, "array of integers", *v);
  std::vector<int64_t> out;
  out.reserve((*a)->items.size());
  for (size_t i = 0; i < (*a)->items.size(); ++i) {
    __int128 x = *as_integer((*a)->items[i]);
    if (x > __int128(std::numeric_limits<int64_t>::max()))
      throw Error(fmt::format("{}: metadata key '{}': element {} does not fit in int64", path_, key, i));
    out.push_back(int64_t(x));
  }
  return out;
}

static Error missing_key(const std::string& path, std::string_view key) {
  return Error(fmt::format("{}: missing metadata key '{}'", path, key));
}

uint64_t File::require_u64(std::string_view key) const {
  if (auto v = get_u64(key)) return *v;
  throw missing_key(path_, key);
}

double File::require_f64(std::string_view key) const {
  if (auto v = get_f64(key)) return *v;
  throw missing_key(path_, key);
}

std::string File::require_string(std::string_view key) const {
  if (auto v = get_string(key)) return *v;
  throw missing_key(path_, key);
}

const Array& File::require_array(std::string_view key) const {
  const Value* v = find(key);
  if (!v) throw missing_key(path_, key);
  auto* a = std::get_if<std::shared_ptr<Array>>(v);
  if (!a) throw type_error(path_, key, "array", *v);
  return **a;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

const TensorInfo& File::require_tensor(std::string_view name) const {
  if (const auto* t = find_tensor(name)) return *t;
  throw Error(fmt::format("{}: missing tensor '{}'", path_, name));
}

}  // namespace shardlm::gguf
