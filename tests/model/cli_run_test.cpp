// `shardlm run` and `shardlm bench -m` end to end, through the built binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "model_test_util.h"

namespace shardlm::test {
namespace {

struct CliResult {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs the binary with stdout on a pipe and stderr in a file. If
// interrupt_after_bytes > 0, sends SIGINT once that much output has arrived.
CliResult run_cli(const std::vector<std::string>& args, size_t interrupt_after_bytes = 0) {
  // Per test process: ctest runs the tests of this file in parallel.
  const std::string err_path = ::testing::TempDir() + "shardlm_cli_stderr." + std::to_string(getpid()) + ".txt";
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    if (!freopen(err_path.c_str(), "w", stderr)) _exit(127);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv{const_cast<char*>(SHARDLM_BINARY)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(SHARDLM_BINARY, argv.data());
    _exit(127);
  }
  close(fds[1]);
  CliResult r;
  char buf[4096];
  bool sent = false;
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) {
    r.out.append(buf, size_t(n));
    if (interrupt_after_bytes > 0 && !sent && r.out.size() >= interrupt_after_bytes) {
      kill(pid, SIGINT);
      sent = true;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.err = slurp(err_path);
  std::remove(err_path.c_str());
  return r;
}

TEST(CliRun, GreedyStoryMatchesLlamaCpp) {
  const auto golden = read_json(golden_path("stories260K.generate.json"))["cases"][0];
  const auto r = run_cli({"run", "-m", model_path("stories260K.gguf"), "-p", "Once upon a time", "-n", "64", "--temp",
                          "0", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "Once upon a time" + golden["generated_text_concat_pieces"].get<std::string>() + "\n");
  for (const char* field : {"load:", "prompt:      5 tokens", "decode:     64 tokens", "VmRSS", "VmHWM"})
    EXPECT_NE(r.err.find(field), std::string::npos) << field << " missing in:\n" << r.err;
}

TEST(CliRun, SameSeedSameTextAndF16CacheRuns) {
  const std::vector<std::string> args{"run", "-m", model_path("stories260K-Q8_0.gguf"), "-p", "Lily and Tom", "-n",
                                      "40", "--seed", "7", "-t", "2", "--kv-type", "f16", "--top-k", "20",
                                      "--repeat-penalty", "1.1"};
  const auto a = run_cli(args), b = run_cli(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_GT(a.out.size(), std::string("Lily and Tom").size() + 40);
  EXPECT_NE(a.err.find("seed 7"), std::string::npos) << a.err;
}

TEST(CliRun, SigintStopsGenerationAndStillPrintsStats) {
  // 30000 tokens would take many seconds; the interrupt comes after the first output.
  const auto r = run_cli({"run", "-m", model_path("stories260K.gguf"), "-p", "Once upon a time", "-n", "30000",
                          "--ctx", "32768", "-t", "1", "--seed", "1"},
                         200);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("interrupted"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("decode:"), std::string::npos) << r.err;
}

TEST(CliRun, BadInputIsOneErrorLine) {
  struct Case {
    std::vector<std::string> args;
    std::string expected;
  };
  const std::vector<Case> cases{
      {{"run", "-m", "/nonexistent.gguf", "-p", "x"}, "/nonexistent.gguf"},
      {{"run", "-m", model_path("vocab/ggml-vocab-gpt-2.gguf"), "-p", "x"}, "unsupported architecture 'gpt2'"},
      {{"run", "-m", model_path("stories260K.gguf"), "-p", "x", "--kv-type", "q4"}, "--kv-type"},
      {{"run", "-m", model_path("stories260K.gguf"), "-p", "Once upon a time", "--ctx", "3"}, "--ctx"},
      {{"bench", "-m", model_path("stories260K.gguf"), "-t", "1,x"}, "-t: 'x'"},
  };
  for (const auto& c : cases) {
    const auto r = run_cli(c.args);
    EXPECT_EQ(r.exit_code, 1) << c.expected;
    EXPECT_EQ(r.err.rfind("shardlm: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
  }
}

TEST(CliBench, PrintsOneRowPerThreadCount) {
  const auto r = run_cli({"bench", "-m", model_path("stories260K.gguf"), "-t", "1,2", "--prompt", "16", "--gen", "4",
                          "--bandwidth-mib", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("|       1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("|       2 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VmHWM"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace shardlm::test
