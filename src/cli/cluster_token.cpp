#include "cli/cluster_token.h"

#include <fmt/format.h>

#include <cstring>
#include <fstream>

#include "comm/transport.h"
#include "core/error.h"

namespace shardlm::cli {

std::string cluster_token(const std::string& token_file) {
  if (token_file.empty()) return comm::load_token("");
  std::ifstream in(token_file);
  if (!in) throw Error(fmt::format("--token-file: cannot read {}: {}", token_file, std::strerror(errno)));
  std::string token;
  std::getline(in, token);
  while (!token.empty() && (token.back() == '\r' || token.back() == ' ')) token.pop_back();
  if (token.empty()) throw Error(fmt::format("--token-file: the first line of {} is empty", token_file));
  return token;
}

}  // namespace shardlm::cli
