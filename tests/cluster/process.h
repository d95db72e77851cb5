// Child processes for the cluster tests: `shardlm worker` daemons and
// coordinator runs, with stdout/stderr captured to files.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace shardlm::test {

inline std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class Process {
 public:
  // argv[0] is the program; env entries are "NAME=value" added to ours.
  Process(std::vector<std::string> argv, const std::filesystem::path& out, const std::filesystem::path& err,
          std::vector<std::string> env = {})
      : out_(out), err_(err) {
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);  // its own group: signal_group() reaches the processes it starts too
      if (!freopen(out.c_str(), "w", stdout) || !freopen(err.c_str(), "w", stderr)) _exit(127);
      for (auto& e : env) putenv(e.data());
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  pid_t pid() const { return pid_; }
  void kill9() {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    exited_ = true;
  }
  // SIGSTOP / SIGCONT / ... to the process and every process it started.
  void signal_group(int sig) { kill(-pid_, sig); }
  // Exit status, or -1 after `limit` (the process is then killed).
  int wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill9();
    return -1;
  }
  bool running() {
    int status = 0;
    if (exited_) return false;
    if (waitpid(pid_, &status, WNOHANG) == pid_) exited_ = true;
    return !exited_;
  }
  std::string out() const { return read_text(out_); }
  std::string err() const { return read_text(err_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::filesystem::path out_, err_;
};

}  // namespace shardlm::test
