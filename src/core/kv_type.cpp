#include "core/kv_type.h"

namespace shardlm {

std::optional<DType> kv_type_from_name(std::string_view name) {
  const auto t = dtype_from_name(name);
  if (t == DType::F32 || t == DType::F16) return t;
  return std::nullopt;
}

}  // namespace shardlm
