#include "cli/usage.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace shardlm::cli {

CLI::Validator finite_in(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(text.c_str(), &end);
        if (text.empty() || *end != '\0') return fmt::format("'{}' is not a number", text);
        if (!std::isfinite(v) || v < lo || v > hi) return fmt::format("{} is not in [{:g}, {:g}]", text, lo, hi);
        return "";
      },
      fmt::format("in [{:g}, {:g}]", lo, hi));
}

CLI::Validator integer_in(long long lo, long long hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        char* end = nullptr;
        errno = 0;
        const long long v = std::strtoll(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno == ERANGE) return fmt::format("'{}' is not an integer", text);
        if (v < lo || v > hi) return fmt::format("{} is not in [{}, {}]", text, lo, hi);
        return "";
      },
      fmt::format("in [{}, {}]", lo, hi));
}

namespace {

std::string kv_type_problem(const std::string& name) {
  return kv_type_from_name(name) ? "" : fmt::format("'{}' is not f32 or f16", name);
}

}  // namespace

CLI::Option* add_kv_type_option(CLI::App& cmd, std::string& into) {
  return cmd.add_option("--kv-type", into, "KV cache type: f32 or f16")
      ->capture_default_str()
      ->check(CLI::Validator([](std::string& text) { return kv_type_problem(text); }, "f32|f16"));
}

CLI::Option* add_mmap_flag(CLI::App& cmd, bool& into) {
  return cmd.add_flag("--mmap", into,
                      "read the weights from the file's mapping at every step instead of copying them into memory "
                      "at load (for a model larger than memory; slower on many machines)");
}

DType kv_type_of(const std::string& name) {
  if (const auto t = kv_type_from_name(name)) return *t;
  throw UsageError(fmt::format("--kv-type: {}", kv_type_problem(name)));
}

}  // namespace shardlm::cli
