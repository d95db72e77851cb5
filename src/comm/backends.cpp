#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "comm/mpi/mpi.h"
#include "comm/shm/shm.h"
#include "comm/tcp/tcp.h"
#include "comm/transport.h"
#include "core/error.h"

namespace shardlm::comm {

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "max"; }

std::unique_ptr<Transport> connect_transport(const ConnectOptions& options) {
  if (options.backend == "tcp") return connect_tcp(options);
  if (options.backend == "shm") return connect_shm(options);
  if (options.backend == "mpi") return connect_mpi(options);
  throw Error(fmt::format("unknown comm backend '{}' (tcp, shm, mpi)", options.backend));
}

static std::string trim(std::string s) {
  auto not_space = [](unsigned char c) { return !std::isspace(c); };
  s.erase(s.begin(), std::find_if(s.begin(), s.end(), not_space));
  s.erase(std::find_if(s.rbegin(), s.rend(), not_space).base(), s.end());
  return s;
}

std::string load_token(const std::string& token_file) {
  if (const char* env = std::getenv("SHARDLM_TOKEN"); env && *env) return env;
  if (token_file.empty())
    throw Error("no shared token: set SHARDLM_TOKEN or pass a token file");
  std::ifstream in(token_file);
  if (!in) throw Error(fmt::format("cannot read token file {}", token_file));
  std::string line;
  std::getline(in, line);
  line = trim(line);
  if (line.empty()) throw Error(fmt::format("token file {}: first line is empty", token_file));
  return line;
}

}  // namespace shardlm::comm
