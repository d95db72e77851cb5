#include "comm/tuning.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <tuple>

#include <fmt/format.h>

#include "core/error.h"

namespace shardlm::comm {
namespace {

constexpr size_t kMinChunk = 4096;
constexpr size_t kMaxChunk = size_t(1) << 30;

bool parse_count(const std::string& word, size_t& out) {
  if (word.empty() || word.size() > 19 || word.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = size_t(std::strtoull(word.c_str(), nullptr, 10));
  return true;
}

auto row_key(const TuningRow& r) { return std::tie(r.backend, r.ranks, r.loopback, r.up_to_bytes); }

}  // namespace

std::optional<AllReduceAlgo> algo_from_name(std::string_view name) {
  for (AllReduceAlgo a : {AllReduceAlgo::Auto, AllReduceAlgo::OneShot, AllReduceAlgo::RecursiveDoubling,
                          AllReduceAlgo::Ring, AllReduceAlgo::Chain, AllReduceAlgo::HalvingDoubling,
                          AllReduceAlgo::Native})
    if (algo_name(a) == name) return a;
  return std::nullopt;
}

TuningTable TuningTable::parse(std::string_view text, const std::string& source) {
  TuningTable table;
  std::istringstream in{std::string(text)};
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::vector<std::string> w;
    for (std::string word; words >> word;) w.push_back(word);
    if (w.empty()) continue;
    auto bad = [&](const std::string& what) {
      return Error(fmt::format("{}:{}: {}", source, line_no, what));
    };
    if (w.size() != 6)
      throw bad(fmt::format("want 6 fields (backend ranks links up_to_bytes algo chunk_bytes), got {}",
                            w.size()));
    TuningRow row;
    row.backend = w[0];
    if (row.backend != "tcp" && row.backend != "shm" && row.backend != "mpi")
      throw bad(fmt::format("backend '{}' (want tcp, shm or mpi)", w[0]));
    size_t ranks = 0;
    if (!parse_count(w[1], ranks) || ranks < 2 || ranks > 4096)
      throw bad(fmt::format("ranks '{}' (want 2..4096)", w[1]));
    row.ranks = int(ranks);
    if (w[2] != "loopback" && w[2] != "other") throw bad(fmt::format("links '{}' (want loopback or other)", w[2]));
    row.loopback = w[2] == "loopback";
    if (w[3] == "max") row.up_to_bytes = SIZE_MAX;
    else if (!parse_count(w[3], row.up_to_bytes)) throw bad(fmt::format("up_to_bytes '{}' is not a byte count", w[3]));
    auto algo = algo_from_name(w[4]);
    if (!algo || *algo == AllReduceAlgo::Auto)
      throw bad(fmt::format("algo '{}' (want native, oneshot, recdbl, ring or chain)", w[4]));
    row.choice.algo = *algo;
    if (!parse_count(w[5], row.choice.chunk_bytes) ||
        (row.choice.chunk_bytes != 0 && (row.choice.chunk_bytes < kMinChunk || row.choice.chunk_bytes > kMaxChunk)))
      throw bad(fmt::format("chunk_bytes '{}' (want 0 or {}..{})", w[5], kMinChunk, kMaxChunk));
    for (const TuningRow& r : table.rows_)
      if (row_key(r) == row_key(row)) throw bad("repeats an earlier row's backend, ranks, links and up_to_bytes");
    table.add(std::move(row));
  }
  return table;
}

std::string TuningTable::default_path() {
  if (const char* p = std::getenv("SHARDLM_COMM_TUNING"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/shardlm/comm-tuning.txt";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/shardlm/comm-tuning.txt";
  return "";
}

std::shared_ptr<const TuningTable> TuningTable::load_default() {
  const std::string path = default_path();
  if (path.empty()) return nullptr;
  std::ifstream f(path);
  if (!f) {
    if (std::getenv("SHARDLM_COMM_TUNING"))
      std::fprintf(stderr, "shardlm: warning: comm tuning file %s cannot be read; using the defaults\n",
                   path.c_str());
    return nullptr;
  }
  std::stringstream text;
  text << f.rdbuf();
  try {
    return std::make_shared<const TuningTable>(parse(text.str(), path));
  } catch (const Error& e) {
    std::fprintf(stderr, "shardlm: warning: ignoring comm tuning file: %s\n", e.what());
    return nullptr;
  }
}

void TuningTable::add(TuningRow row) {
  auto at = std::upper_bound(rows_.begin(), rows_.end(), row,
                             [](const TuningRow& a, const TuningRow& b) { return row_key(a) < row_key(b); });
  rows_.insert(at, std::move(row));
}

std::optional<AllReduceChoice> TuningTable::lookup(std::string_view backend, int ranks, bool loopback,
                                                   size_t bytes) const {
  for (const TuningRow& r : rows_)  // sorted: the first covering row is the tightest
    if (r.backend == backend && r.ranks == ranks && r.loopback == loopback && bytes <= r.up_to_bytes)
      return r.choice;
  return std::nullopt;
}

std::string TuningTable::to_text() const {
  std::string out = "# shardlm comm tuning: backend ranks links up_to_bytes algo chunk_bytes\n";
  for (const TuningRow& r : rows_)
    out += fmt::format("{} {} {} {} {} {}\n", r.backend, r.ranks, r.loopback ? "loopback" : "other",
                       r.up_to_bytes == SIZE_MAX ? std::string("max") : std::to_string(r.up_to_bytes),
                       algo_name(r.choice.algo), r.choice.chunk_bytes);
  return out;
}

size_t pick_tuned(const std::vector<AllReduceChoice>& candidates, const std::vector<double>& us,
                  AllReduceChoice previous) {
  size_t pick = size_t(std::min_element(us.begin(), us.end()) - us.begin());
  const double fastest = us[pick];
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].algo == previous.algo && candidates[i].chunk_bytes == previous.chunk_bytes &&
        us[i] <= fastest * (1 + kTuneMargin))
      pick = i;
  for (size_t i = 0; i < candidates.size(); ++i)
    if (candidates[i].algo == AllReduceAlgo::Native && us[i] <= fastest * (1 + kTuneMargin)) pick = i;
  return pick;
}

AllReduceChoice default_all_reduce(const CommConfig& c, std::string_view backend, int ranks, bool loopback,
                                   size_t bytes) {
  if (backend == "shm" || backend == "mpi") return {AllReduceAlgo::Native, 0};
  return sized_all_reduce(c, ranks, loopback, bytes);
}

AllReduceChoice sized_all_reduce(const CommConfig& c, int ranks, bool loopback, size_t bytes) {
  if (bytes < c.small_bytes) return {AllReduceAlgo::OneShot, 0};
  if (bytes < c.ring_from_bytes) return {AllReduceAlgo::RecursiveDoubling, 0};
  if (bytes >= c.chain_from_bytes && ranks == 2 && loopback) return {AllReduceAlgo::Chain, 0};
  if (ranks >= 4 && std::has_single_bit(unsigned(ranks)) && bytes < c.halving_below_bytes)
    return {AllReduceAlgo::HalvingDoubling, 0};
  return {AllReduceAlgo::Ring, 0};
}

}  // namespace shardlm::comm
