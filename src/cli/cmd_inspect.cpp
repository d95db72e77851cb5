// shardlm inspect FILE.gguf: what a model file holds, as text or JSON. The
// summary is built once as ordered JSON and the text form is printed from it,
// so both outputs always agree.
#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "gguf/file_type.h"
#include "gguf/gguf.h"

namespace shardlm::cli {
namespace {

using Json = nlohmann::ordered_json;

struct InspectOptions {
  std::string path;
  bool json = false;
  bool metadata = false;  // every key, not only the summary
  bool no_tensors = false;
};

std::string shortest(double v, bool single) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return fmt::format("{:.0f}", v);
  char buf[64];
  auto r = single ? std::to_chars(buf, buf + sizeof buf, float(v)) : std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

// JSON form of a metadata value; long arrays are cut to their first items
// unless `full` (strings are kept as they are: JSON escapes them).
Json to_json(const gguf::Value& v, bool full) {
  return std::visit(
      [&](const auto& x) -> Json {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::shared_ptr<gguf::Array>>) {
          constexpr size_t kShown = 8;
          if (!full && x->items.size() > kShown) {
            Json head = Json::array();
            for (size_t i = 0; i < kShown; ++i) head.push_back(to_json(x->items[i], false));
            return Json{{"type", gguf::value_type_name(x->type)}, {"count", x->items.size()}, {"first", head}};
          }
          Json a = Json::array();
          for (const auto& item : x->items) a.push_back(to_json(item, full));
          return a;
        } else if constexpr (std::is_same_v<T, float>) {
          return std::isfinite(x) ? Json(std::stod(shortest(x, true))) : Json(shortest(x, true));
        } else if constexpr (std::is_same_v<T, double>) {
          return std::isfinite(x) ? Json(x) : Json(shortest(x, false));
        } else {  // strings: invalid UTF-8 is replaced when dumped
          return Json(x);
        }
      },
      v);
}

// One-line text form: strings escaped and cut, arrays summarised.
std::string to_text(const gguf::Value& v) {
  if (const auto* f = std::get_if<float>(&v)) return shortest(*f, true);
  if (const auto* d = std::get_if<double>(&v)) return shortest(*d, false);
  if (const auto* s = std::get_if<std::string>(&v)) {
    std::string out;
    for (unsigned char c : *s) {
      if (out.size() >= 80) return out + "...";
      if (c == '\n') out += "\\n";
      else if (c < 0x20) out += fmt::format("\\x{:02x}", c);
      else out += char(c);
    }
    return out;
  }
  if (const auto* a = std::get_if<std::shared_ptr<gguf::Array>>(&v)) {
    std::string out = fmt::format("[{} x {}]", (*a)->items.size(), gguf::value_type_name((*a)->type));
    if ((*a)->type != gguf::ValueType::ARRAY && !(*a)->items.empty()) {
      out += " ";
      for (size_t i = 0; i < std::min<size_t>(4, (*a)->items.size()); ++i)
        out += (i ? ", " : "") + to_text((*a)->items[i]);
      if ((*a)->items.size() > 4) out += ", ...";
    }
    return out;
  }
  return to_json(v, false).dump();
}

// The architecture's own keys without their prefix, plus the values llama.cpp
// assumes when the file is silent (listed in j["implied"]).
void add_hyperparameters(const gguf::File& f, const std::string& arch, Json& j) {
  Json hp = Json::object();
  const std::string prefix = arch + ".";
  for (const auto& [key, value] : f.metadata())
    if (!arch.empty() && key.rfind(prefix, 0) == 0) hp[key.substr(prefix.size())] = to_json(value, false);
  Json implied = Json::object();
  if (!arch.empty() && !hp.contains("rope.freq_base")) {
    hp["rope.freq_base"] = 10000.0;
    implied["rope.freq_base"] = "default";
  }
  const auto n_embd = f.get_u64(prefix + "embedding_length");
  const gguf::Value* heads = f.find(prefix + "attention.head_count");
  if (!hp.contains("attention.key_length") && n_embd && heads && std::holds_alternative<uint32_t>(*heads) &&
      std::get<uint32_t>(*heads) > 0) {
    hp["head_dim"] = *n_embd / std::get<uint32_t>(*heads);
    implied["head_dim"] = "embedding_length / attention.head_count";
  }
  j["hyperparameters"] = hp;
  j["implied"] = implied;
}

Json tokenizer_summary(const gguf::File& f) {
  Json tok = Json::object();
  tok["model"] = f.get_string("tokenizer.ggml.model").value_or("");
  tok["pre"] = f.get_string("tokenizer.ggml.pre").value_or("");
  if (const auto* t = f.find("tokenizer.ggml.tokens"); t && std::holds_alternative<std::shared_ptr<gguf::Array>>(*t))
    tok["vocab_size"] = std::get<std::shared_ptr<gguf::Array>>(*t)->items.size();
  if (const auto* m = f.find("tokenizer.ggml.merges"); m && std::holds_alternative<std::shared_ptr<gguf::Array>>(*m))
    tok["merges"] = std::get<std::shared_ptr<gguf::Array>>(*m)->items.size();
  for (const char* id : {"bos", "eos", "unknown", "padding"})
    if (auto v = f.get_i64(fmt::format("tokenizer.ggml.{}_token_id", id))) tok[std::string(id) + "_id"] = *v;
  if (auto b = f.get_bool("tokenizer.ggml.add_bos_token")) tok["add_bos"] = *b;
  else tok["add_bos"] = "unset";
  if (f.has("tokenizer.chat_template")) tok["chat_template"] = true;
  return tok;
}

// Tensor counts, types and sizes; with experts, what a token actually reads:
// only expert_used_count of expert_count experts, so it is computed by fewer
// parameters than the file holds. Returns the per-tensor list.
Json add_tensor_totals(const gguf::File& f, const std::string& arch, bool list_tensors, Json& j) {
  uint64_t bytes = 0, params = 0, expert_params = 0, expert_bytes = 0;
  std::map<std::string, int> type_counts;
  Json tensors = Json::array();
  for (const auto& t : f.tensors()) {
    bytes += t.n_bytes;
    params += uint64_t(t.n_elements());
    if (t.name.find("_exps.") != std::string::npos) {
      expert_params += uint64_t(t.n_elements());
      expert_bytes += t.n_bytes;
    }
    ++type_counts[std::string(dtype_name(t.type))];
    if (list_tensors)
      tensors.push_back({{"name", t.name},
                         {"shape", std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims)},
                         {"type", dtype_name(t.type)},
                         {"bytes", t.n_bytes},
                         {"offset", t.offset}});
  }
  j["n_tensors"] = f.tensors().size();
  j["tensor_types"] = type_counts;
  j["weight_bytes"] = bytes;
  j["n_params"] = params;
  const std::string prefix = arch + ".";
  const auto n_expert = f.get_u64(prefix + "expert_count");
  const auto n_used = f.get_u64(prefix + "expert_used_count");
  if (n_expert && *n_expert > 0 && n_used && *n_used <= *n_expert) {
    Json e;
    e["count"] = *n_expert;
    e["used_per_token"] = *n_used;
    e["shared"] = f.get_u64(prefix + "expert_shared_count").value_or(0);
    e["parameters"] = expert_params;
    j["experts"] = e;
    const auto inactive = [&](uint64_t v) { return uint64_t(double(v) * double(*n_expert - *n_used) / double(*n_expert)); };
    j["active_params"] = params - inactive(expert_params);
    j["active_weight_bytes"] = bytes - inactive(expert_bytes);
  }
  return tensors;
}

Json summarize(const gguf::File& f, const InspectOptions& o) {
  Json j;
  j["file"] = f.path();
  j["file_size"] = f.file_size();
  j["gguf_version"] = f.version();
  j["alignment"] = f.alignment();
  j["data_offset"] = f.data_offset();
  const std::string arch = f.get_string("general.architecture").value_or("");
  j["architecture"] = arch;
  j["name"] = f.get_string("general.name").value_or("");
  if (auto ft = f.get_u64("general.file_type")) j["file_type"] = gguf::file_type_name(uint32_t(*ft));
  add_hyperparameters(f, arch, j);
  j["tokenizer"] = tokenizer_summary(f);
  Json tensors = add_tensor_totals(f, arch, !o.no_tensors, j);
  if (!o.no_tensors) j["tensors"] = std::move(tensors);
  if (o.metadata) {
    Json all = Json::object();
    for (const auto& [key, value] : f.metadata()) all[key] = to_json(value, o.json);
    j["metadata"] = all;
  }
  return j;
}

std::string with_commas(uint64_t v) {
  const std::string digits = std::to_string(v);
  std::string s;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string scalar_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  return v.is_number_float() ? shortest(v.get<double>(), false) : v.dump();
}

void print_text(const gguf::File& f, const Json& j) {
  auto line = [](std::string_view key, const std::string& value) { fmt::print("{:<34} {}\n", key, value); };
  line("file:", j["file"].get<std::string>());
  line("file size:", with_commas(j["file_size"]) + " bytes");
  line("GGUF version:", std::to_string(f.version()));
  line("data:", fmt::format("offset {}, alignment {}", f.data_offset(), f.alignment()));
  line("architecture:", j["architecture"]);
  line("name:", j["name"]);
  if (j.contains("file_type")) line("file type:", j["file_type"]);
  for (const auto& [key, value] : j["hyperparameters"].items()) {
    const std::string full = j["architecture"].get<std::string>() + "." + key;
    const gguf::Value* raw = f.find(full);
    line(key + ":", raw ? to_text(*raw)
                        : fmt::format("{} ({})", scalar_text(value), j["implied"][key].get<std::string>()));
  }
  const auto& tok = j["tokenizer"];
  line("tokenizer:", tok["model"].get<std::string>().empty() ? "(none)" : tok["model"].get<std::string>());
  line("pre-tokenizer:", tok["pre"].get<std::string>().empty() ? "(none)" : tok["pre"].get<std::string>());
  for (const char* k : {"vocab_size", "merges", "bos_id", "eos_id", "unknown_id", "padding_id", "add_bos"})
    if (tok.contains(k)) line(std::string(k) + ":", scalar_text(tok[k]));
  if (j.contains("metadata")) {
    fmt::print("\nmetadata ({} keys):\n", f.metadata().size());
    for (const auto& [key, value] : f.metadata()) fmt::print("  {:<48} {:<7} {}\n", key, gguf::value_type_name(gguf::type_of(value)), to_text(value));
  }
  if (j.contains("tensors")) {
    fmt::print("\n{:>5}  {:<36} {:<24} {:<8} {:>14}\n", "#", "tensor", "shape", "type", "bytes");
    for (size_t i = 0; i < f.tensors().size(); ++i) {
      const auto& t = f.tensors()[i];
      fmt::print("{:>5}  {:<36} {:<24} {:<8} {:>14}\n", i, t.name, t.shape_string(), dtype_name(t.type),
                 with_commas(t.n_bytes));
    }
    fmt::print("\n");
  }
  std::string types;
  for (const auto& [name, count] : j["tensor_types"].items()) types += fmt::format("{}{} x{}", types.empty() ? "" : ", ", name, count.get<int>());
  line("tensors:", fmt::format("{} ({})", j["n_tensors"].get<size_t>(), types));
  line("weight bytes:", with_commas(j["weight_bytes"]));
  line("parameters:", with_commas(j["n_params"]));
  if (j.contains("experts")) {
    const auto& e = j["experts"];
    line("experts:", fmt::format("{} ({} used per token{}), {} parameters", e["count"].get<uint64_t>(),
                                 e["used_per_token"].get<uint64_t>(),
                                 e["shared"].get<uint64_t>() ? fmt::format(", {} shared", e["shared"].get<uint64_t>()) : "",
                                 with_commas(e["parameters"])));
    line("active parameters:", with_commas(j["active_params"]) + " per token");
    line("active weight bytes:", with_commas(j["active_weight_bytes"]) + " per token");
  }
}

void inspect(const InspectOptions& o) {
  const auto file = gguf::File::open(o.path);
  const Json j = summarize(*file, o);
  if (o.json) std::puts(j.dump(2, ' ', false, Json::error_handler_t::replace).c_str());
  else print_text(*file, j);
}

}  // namespace

void add_inspect(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  auto* cmd = app.add_subcommand("inspect", "show a GGUF file's metadata, hyper-parameters and tensors");
  cmd->add_option("file", o->path, "GGUF file")->required();
  cmd->add_flag("--json", o->json, "machine-readable output");
  cmd->add_flag("--metadata", o->metadata, "also list every metadata key (full arrays with --json)");
  cmd->add_flag("--no-tensors", o->no_tensors, "omit the tensor table");
  cmd->callback([o] { inspect(*o); });
}

}  // namespace shardlm::cli
