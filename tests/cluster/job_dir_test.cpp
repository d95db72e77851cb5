#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "cluster/worker_job.h"

namespace shardlm::cluster {
namespace {

namespace fs = std::filesystem;

// A process number that no process has: a child that has exited and been reaped.
int gone_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return int(child);
}

// A daemon port no test daemon gets (they listen on ephemeral ports).
constexpr int kPort = 9;

TEST(JobTempDir, OrphansOfThePortAreRemovedLiveOnesAndOtherPortsKept) {
  const fs::path orphan = job_temp_dir(gone_pid(), kPort);
  const fs::path live = job_temp_dir(int(::getpid()), kPort);      // another namespace's job on the same port
  const fs::path other_port = job_temp_dir(gone_pid(), kPort + 1);  // another daemon's
  const fs::path unrelated = fs::temp_directory_path() / "shardlm-worker-notapid-9";
  for (const auto& dir : {orphan, live, other_port, unrelated}) {
    fs::create_directories(dir / "sub");
    std::ofstream(dir / "sub" / "slice.bin") << "bytes";
  }
  EXPECT_EQ(remove_orphaned_job_dirs(kPort), 1);
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_TRUE(fs::exists(live / "sub" / "slice.bin"));
  EXPECT_TRUE(fs::exists(other_port));
  EXPECT_TRUE(fs::exists(unrelated));
  for (const auto& dir : {live, other_port, unrelated}) fs::remove_all(dir);
}

}  // namespace
}  // namespace shardlm::cluster
