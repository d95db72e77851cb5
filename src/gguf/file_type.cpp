#include "gguf/file_type.h"

#include <array>
#include <string_view>

namespace shardlm::gguf {
namespace {

struct Entry {
  uint32_t id;
  std::string_view name;
  std::optional<DType> type;  // the weight type that selects this file_type
};

constexpr std::array kFileTypes = {
    Entry{0, "ALL_F32", DType::F32},          Entry{1, "MOSTLY_F16", DType::F16},
    Entry{2, "MOSTLY_Q4_0", DType::Q4_0},     Entry{3, "MOSTLY_Q4_1", DType::Q4_1},
    Entry{7, "MOSTLY_Q8_0", DType::Q8_0},     Entry{8, "MOSTLY_Q5_0", DType::Q5_0},
    Entry{9, "MOSTLY_Q5_1", DType::Q5_1},     Entry{10, "MOSTLY_Q2_K", DType::Q2_K},
    Entry{11, "MOSTLY_Q3_K_S", {}},           Entry{12, "MOSTLY_Q3_K_M", DType::Q3_K},
    Entry{13, "MOSTLY_Q3_K_L", {}},           Entry{14, "MOSTLY_Q4_K_S", {}},
    Entry{15, "MOSTLY_Q4_K_M", DType::Q4_K},  Entry{16, "MOSTLY_Q5_K_S", {}},
    Entry{17, "MOSTLY_Q5_K_M", DType::Q5_K},  Entry{18, "MOSTLY_Q6_K", DType::Q6_K},
    Entry{19, "MOSTLY_IQ2_XXS", {}},          Entry{20, "MOSTLY_IQ2_XS", {}},
    Entry{21, "MOSTLY_Q2_K_S", {}},           Entry{22, "MOSTLY_IQ3_XS", {}},
    Entry{23, "MOSTLY_IQ3_XXS", {}},          Entry{24, "MOSTLY_IQ1_S", {}},
    Entry{25, "MOSTLY_IQ4_NL", {}},           Entry{26, "MOSTLY_IQ3_S", {}},
    Entry{27, "MOSTLY_IQ3_M", {}},            Entry{28, "MOSTLY_IQ2_S", {}},
    Entry{29, "MOSTLY_IQ2_M", {}},            Entry{30, "MOSTLY_IQ4_XS", {}},
    Entry{31, "MOSTLY_IQ1_M", {}},            Entry{32, "MOSTLY_BF16", DType::BF16},
    Entry{36, "MOSTLY_TQ1_0", {}},            Entry{37, "MOSTLY_TQ2_0", {}},
    Entry{38, "MOSTLY_MXFP4_MOE", {}},
};

}  // namespace

std::string file_type_name(uint32_t file_type) {
  for (const auto& e : kFileTypes)
    if (e.id == file_type) return std::string(e.name);
  return "unknown (" + std::to_string(file_type) + ")";
}

std::optional<uint32_t> file_type_for(DType type) {
  for (const auto& e : kFileTypes)
    if (e.type == type) return e.id;
  return std::nullopt;
}

}  // namespace shardlm::gguf
