#include "core/env.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>

#include "core/error.h"

namespace shardlm {

size_t env_bytes(const char* name, size_t fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (*v < '0' || *v > '9' || *end != '\0' || errno == ERANGE)
    throw Error(fmt::format("{}='{}' is not a byte count", name, v));
  return size_t(n);
}

}  // namespace shardlm
