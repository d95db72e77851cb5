// One job of a worker, in a process of its own (`shardlm worker` spawns it
// for each job it accepts): read the Job, receive or find the slices, join the
// job's communicator, follow the parallel runtime until the coordinator ends
// the job. Running it apart from the daemon means a job that must be given up
// (a peer dead or silent, the coordinator gone) ends with its process, however
// blocked its threads were, and the daemon is idle again at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "net/handshake.h"

namespace shardlm::cluster {

// What the daemon hands to a job process besides the connection.
struct JobContext {
  std::string token;
  std::string cache_dir;     // empty: a temporary directory for the job
  std::string peer;          // "coordinator ip:port", for messages
  int daemon_port = 0;       // names the temporary directory
  int daemon_pid = 0;        // the job process ends with it
  uint64_t cache_max_bytes = 0;  // 0: no limit
  // The connection's frame checks (net/frame_auth.h) as the daemon left
  // them: its session key and the frames each way so far.
  net::SessionKey session_key{};
  uint64_t frames_sent = 0, frames_received = 0;
};

std::string job_context_to_text(const JobContext& c);
// Where a job process without a cache directory keeps its slices. The daemon
// removes it when the process ends, however it ended (a job given up exits
// at once, a killed one cannot clean up).
std::filesystem::path job_temp_dir(int job_pid, int daemon_port);
// Removes the job directories of this daemon's port whose process is gone: a
// daemon killed with its job (kill -9, a crash, a reboot) left its slices,
// gigabytes, in the temporary directory. Returns how many it removed.
int remove_orphaned_job_dirs(int daemon_port);
JobContext job_context_from_text(const std::string& text);

// Serves the job whose Job message comes next on `fd` (authenticated, Info
// already sent). Returns the process's exit status: 0 when the job ended as
// the coordinator asked. Never throws.
int serve_job(int fd, const JobContext& context);

}  // namespace shardlm::cluster
