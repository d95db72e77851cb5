// Which all-reduce algorithm and piece size to use, by backend, group size,
// link kind and message size: measured by `shardlm bench comm --tune`, which
// writes a tuning table, or the built-in defaults when there is none.
//
// Table file: $SHARDLM_COMM_TUNING, else $XDG_CACHE_HOME/shardlm/comm-tuning.txt,
// else ~/.cache/shardlm/comm-tuning.txt. One row a line, '#' comments:
//   backend ranks links up_to_bytes algo chunk_bytes
//   tcp     2     loopback 262143 recdbl 0
//   tcp     2     loopback max    chain  524288
// backend: tcp|shm|mpi; links: loopback (every peer of the group is reached
// through this host's own network stack) or other; up_to_bytes: the largest
// message the row covers (or "max"); algo: native (the backend's own
// collective, e.g. MPI_Allreduce) or one of comm/algorithms.h; chunk_bytes:
// ring/chain piece size (0: CommConfig::ring_chunk_bytes). For one (backend,
// ranks, links) the row with the smallest up_to_bytes >= the message size
// applies. A file that does not parse is ignored with a one-line warning.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/communicator.h"

namespace shardlm::comm {

struct TuningRow {
  std::string backend;
  int ranks = 0;
  bool loopback = false;
  size_t up_to_bytes = 0;  // SIZE_MAX for "max"
  AllReduceChoice choice;
};

class TuningTable {
 public:
  // Throws Error "<source>:<line>: <what is wrong>" for a bad row.
  static TuningTable parse(std::string_view text, const std::string& source);
  // The table file above; nullptr when there is none, or (after a warning
  // on stderr) when it does not parse.
  static std::shared_ptr<const TuningTable> load_default();
  static std::string default_path();

  void add(TuningRow row);
  std::optional<AllReduceChoice> lookup(std::string_view backend, int ranks, bool loopback,
                                        size_t bytes) const;
  std::string to_text() const;
  const std::vector<TuningRow>& rows() const { return rows_; }

 private:
  std::vector<TuningRow> rows_;  // sorted by (backend, ranks, links, up_to_bytes)
};

// Built-in choice without a table: the backend's own collective where it has
// one (shm, mpi), else sized_all_reduce.
AllReduceChoice default_all_reduce(const CommConfig& config, std::string_view backend, int ranks,
                                   bool loopback, size_t bytes);
// By size with config's thresholds: one-shot, recursive doubling, ring, and
// the chain for two ranks on a loopback link.
AllReduceChoice sized_all_reduce(const CommConfig& config, int ranks, bool loopback, size_t bytes);

// What `bench comm --tune` keeps at one size, given each candidate's time
// (us[i]: the middle of its timed passes) and the previous size's choice:
// the fastest, but the previous choice while within kTuneMargin of it (so
// noise does not cut the table into alternating rows), and the backend's
// own all-reduce (native) while within kTuneMargin of the fastest (ours
// only where it clearly wins). Returns an index into candidates.
inline constexpr double kTuneMargin = 0.1;
size_t pick_tuned(const std::vector<AllReduceChoice>& candidates, const std::vector<double>& us,
                  AllReduceChoice previous);

// Parses an algorithm name as algo_name() prints it; nullopt if unknown.
std::optional<AllReduceAlgo> algo_from_name(std::string_view name);

}  // namespace shardlm::comm
