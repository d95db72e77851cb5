#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>

#include <fmt/format.h>

#include "comm/transport.h"
#include "core/error.h"

namespace shardlm::comm {

std::string_view reduce_op_name(ReduceOp op) { return op == ReduceOp::Sum ? "sum" : "max"; }

std::unique_ptr<Transport> connect_transport(const ConnectOptions& options) {
  if (options.backend == "tcp") return connect_tcp(options);
#ifdef SHARDLM_COMM_HAVE_SHM
  if (options.backend == "shm") return connect_shm(options);
#endif
#ifdef SHARDLM_COMM_HAVE_MPI
  if (options.backend == "mpi") return connect_mpi(options);
#endif
  if (options.backend == "shm" || options.backend == "mpi")
    throw Error(fmt::format("comm backend '{}' is not built into this binary", options.backend));
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

std::vector<std::string> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("cannot read hostfile {}", path));
  std::vector<std::string> hosts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    if (line.find_first_of(" \t") != std::string::npos)
      throw Error(fmt::format("hostfile {}:{}: expected one host[:port] per line", path, n));
    hosts.push_back(line);
  }
  if (hosts.empty()) throw Error(fmt::format("hostfile {}: no hosts", path));
  return hosts;
}

}  // namespace shardlm::comm
