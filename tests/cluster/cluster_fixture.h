// The fixture of the multi-process cluster tests: `shardlm worker` daemons on
// OS-chosen ports and `shardlm run --nodes ...` coordinators, each with its
// stdout/stderr in a per-test directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "cluster/process.h"
#include "cluster/worker_job.h"
#include "test_paths.h"

namespace shardlm::test {

namespace fs = std::filesystem;


inline const std::string& kModel = shardlm::test_paths::kStoriesModel;
inline const std::string kToken = "SHARDLM_TOKEN=cluster-test-token";

// Non-overlapping occurrences of `what` in `text`.
inline size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// Polls of 20 ms to wait for readiness (a worker's port file, a job's first
// tokens), which no test measures: a worker times its kernel rates before
// it listens, ~6 s under AddressSanitizer alone and more with other tests on
// the cores, where 10 s was once too short.
inline constexpr int kReadyPolls = 3000;

// Until p (a job) has printed `bytes`: its tokens flow.
inline void wait_for_output(Process& p, size_t bytes) {
  for (int i = 0; i < kReadyPolls && p.out().size() < bytes; ++i) usleep(20000);
  ASSERT_GE(p.out().size(), bytes) << p.err();
}

// Polls of 20 ms, at most `polls`, until p's stderr holds `text`; whether it does.
inline bool wait_for_err(Process& p, const std::string& text, int polls) {
  for (int i = 0; i < polls && p.err().find(text) == std::string::npos; ++i) usleep(20000);
  return p.err().find(text) != std::string::npos;
}

// The temporary directory of the last job `worker` (serving on `node`,
// "host:port") ran, by the process number the worker logged for it; empty
// when it logged none.
inline fs::path last_job_dir(Process& worker, const std::string& node) {
  const std::string err = worker.err(), marker = "runs in process ";
  const auto at = err.rfind(marker);
  if (at == std::string::npos) return {};
  const int pid = std::atoi(err.c_str() + at + marker.size());
  return cluster::job_temp_dir(pid, std::atoi(node.c_str() + node.rfind(':') + 1));
}

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("shardlm-cluster-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    workers_.clear();  // killed with their jobs: what their jobs kept stays behind
    for (int port : ports_) cluster::remove_orphaned_job_dirs(port);
    fs::remove_all(dir_);
  }

  // Starts a worker and returns "127.0.0.1:port".
  std::string start_worker(std::vector<std::string> extra = {}, std::vector<std::string> env = {}) {
    const int i = int(workers_.size());
    const fs::path port_file = dir_ / ("port" + std::to_string(i));
    std::vector<std::string> argv = {shardlm::test_paths::shardlm_binary(), "worker",  "--listen", "127.0.0.1:0", "--port-file",
                                     port_file.string(), "--probe-mib", "1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    env.push_back(kToken);
    const fs::path log = dir_ / ("worker" + port_file.filename().string());
    workers_.push_back(std::make_unique<Process>(argv, fs::path(log).concat(".out"), fs::path(log).concat(".err"), env));
    for (int tries = 0; tries < kReadyPolls && !fs::exists(port_file); ++tries) usleep(20000);
    EXPECT_TRUE(fs::exists(port_file)) << workers_.back()->err();
    std::string port = read_text(port_file);
    while (!port.empty() && port.back() == '\n') port.pop_back();
    ports_.push_back(std::atoi(port.c_str()));
    return "127.0.0.1:" + port;
  }

  std::unique_ptr<Process> start_run(std::vector<std::string> args, std::vector<std::string> env = {kToken}) {
    std::vector<std::string> argv = {shardlm::test_paths::shardlm_binary(), "run", "-m", kModel, "-p", "Once upon a time",
                                     "--temp", "0", "--seed", "1", "-t", "1"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string n = std::to_string(runs_++);
    return std::make_unique<Process>(argv, dir_ / ("run" + n + ".out"), dir_ / ("run" + n + ".err"), env);
  }

  struct Result {
    int status;
    std::string out, err;
  };
  Result run(std::vector<std::string> args, std::vector<std::string> env = {kToken}) {
    auto p = start_run(std::move(args), std::move(env));
    const int status = p->wait();
    return {status, p->out(), p->err()};
  }

  const std::string& single_node() {
    static std::string reference;
    if (reference.empty()) {
      auto r = run({"-n", "40"});
      EXPECT_EQ(r.status, 0) << r.err;
      reference = r.out;
    }
    return reference;
  }

  fs::path dir_;
  std::vector<std::unique_ptr<Process>> workers_;
  std::vector<int> ports_;
  int runs_ = 0;
};

}  // namespace shardlm::test
