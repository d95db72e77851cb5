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
#include "test_paths.h"

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
CliResult run_cli(const std::vector<std::string>& args, size_t interrupt_after_bytes = 0,
                  const std::string& stdin_text = "") {
  // Per test process: ctest runs the tests of this file in parallel.
  const std::string err_path = ::testing::TempDir() + "shardlm_cli_stderr." + std::to_string(getpid()) + ".txt";
  int fds[2], in[2];
  if (pipe(fds) != 0 || pipe(in) != 0) throw std::runtime_error("pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(in[0], 0);
    close(in[0]);
    close(in[1]);
    if (!freopen(err_path.c_str(), "w", stderr)) _exit(127);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv{const_cast<char*>(shardlm::test_paths::shardlm_binary())};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(shardlm::test_paths::shardlm_binary(), argv.data());
    _exit(127);
  }
  close(fds[1]);
  close(in[0]);
  if (!stdin_text.empty() && write(in[1], stdin_text.data(), stdin_text.size()) != ssize_t(stdin_text.size()))
    throw std::runtime_error("write");
  close(in[1]);
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

struct BadCase {
  std::vector<std::string> args;
  int status;  // 2: usage error, 1: runtime error
  std::string expected;
};

void expect_one_error_line(const BadCase& c) {
  const auto r = run_cli(c.args);
  std::string joined;
  for (const auto& a : c.args) joined += a + " ";
  EXPECT_EQ(r.exit_code, c.status) << joined << "\n" << r.err;
  EXPECT_EQ(r.err.rfind("shardlm: error: ", 0), 0u) << joined << "\n" << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << joined << "\n" << r.err;
  EXPECT_NE(r.err.find(c.expected), std::string::npos) << joined << "\n" << r.err;
  EXPECT_EQ(r.out, "") << joined;
}

TEST(CliRun, BadInputIsOneErrorLine) {
  const std::string m = model_path("stories260K.gguf");
  const std::vector<BadCase> cases{
      {{"run", "-m", "/nonexistent.gguf", "-p", "x"}, 1, "/nonexistent.gguf"},
      {{"run", "-m", model_path("vocab/ggml-vocab-gpt-2.gguf"), "-p", "x"}, 1, "unsupported architecture 'gpt2'"},
      {{"run", "-m", m, "-p", "Once upon a time", "--ctx", "3"}, 1, "--ctx"},
      // A prompt that fills the context exactly leaves no room for the first token.
      {{"run", "-m", m, "-p", "Once", "--ctx", "2"}, 1, "-p: the prompt has 2 tokens; --ctx 2 must be larger"},
  };
  for (const auto& c : cases) expect_one_error_line(c);
}

// Every value a flag cannot take, per subcommand: exit 2 and the flag named.
TEST(CliRun, BadValuesAreUsageErrors) {
  const std::string m = model_path("stories260K.gguf");
  const std::vector<std::string> run = {"run", "-m", m, "-p", "x"};
  auto with = [](std::vector<std::string> base, std::vector<std::string> more) {
    base.insert(base.end(), more.begin(), more.end());
    return base;
  };
  const std::vector<BadCase> cases{
      {with(run, {"--temp", "-1"}), 2, "--temp"},
      {with(run, {"--temp", "nan"}), 2, "--temp"},
      {with(run, {"--temp", "inf"}), 2, "--temp"},
      {with(run, {"--top-p", "2"}), 2, "--top-p"},
      {with(run, {"--top-p", "-0.5"}), 2, "--top-p"},
      {with(run, {"--min-p", "2"}), 2, "--min-p"},
      {with(run, {"--top-k", "-1"}), 2, "--top-k"},
      {with(run, {"--repeat-last-n", "-1"}), 2, "--repeat-last-n"},
      {with(run, {"--repeat-penalty", "0"}), 2, "--repeat-penalty"},
      {with(run, {"-n", "-2"}), 2, "-n"},
      {with(run, {"-t", "1000"}), 2, "-t: 1000 threads"},
      {with(run, {"--ctx", "0"}), 2, "--ctx"},
      {with(run, {"-b", "0"}), 2, "--batch"},
      {with(run, {"--kv-type", "q4"}), 2, "--kv-type: 'q4' is not f32 or f16"},
      {{"bench", "-m", m, "--kv-type", "bf16"}, 2, "--kv-type: 'bf16' is not f32 or f16"},
      {{"bench", "-m", m, "-t", "1,x"}, 2, "--threads: 'x' is not an integer"},
      {{"bench", "-m", m, "-t", "2,0"}, 2, "--threads: 0 is not in [1, 1024]"},
      {with(run, {"--tp", "2"}), 2, "--tp: only with --nodes"},
      {with(run, {"--pp", "2"}), 2, "--pp: only with --nodes"},
      {with(run, {"--layers", "2,3"}), 2, "--layers: only with --nodes"},
      {with(run, {"--nodes", "127.0.0.1:99999"}), 2, "--nodes: bad port"},
      {with(run, {"--nodes", "127.0.0.1"}), 2, "is not host:port"},
      {with(run, {"--nodes", "a:1", "--hostfile", "/dev/null"}), 2, "give one of them"},
      {with(run, {"--nodes", "127.0.0.1:1", "--peer-timeout", "0"}), 2, "--peer-timeout"},
      {with(run, {"--temp", "0", "--temp", "1"}), 2, "--temp"},
      {{"run", "-m", m, "-f", "/nonexistent/prompt.txt"}, 2, "-f: cannot read /nonexistent/prompt.txt"},
      {{"run", "-m", m}, 2, "-p/-f"},
      {{"frobnicate"}, 2, "subcommand"},
      {{"--log-level", "loud", "run", "-m", m, "-p", "x"}, 2, "--log-level"},
      {{"plan", "-m", m, "--nodes", "127.0.0.1:99999"}, 2, "--nodes: bad port"},
      {{"plan", "-m", m, "--nodes", "a:1,a:1"}, 2, "listed twice"},
      {{"plan", "-m", m}, 2, "give exactly one of"},
      {{"plan", "-m", m, "--describe", "x.json", "--ctx", "-5"}, 2, "--ctx"},
      {{"plan", "-m", m, "--describe", "x.json", "--layers", "2,x"}, 2, "--layers"},
      {{"plan", "-m", m, "--describe", "x.json", "--kv-type", "q8"}, 2, "--kv-type: 'q8' is not f32 or f16"},
      {{"worker", "--max-jobs", "0"}, 2, "--max-jobs"},
      {{"worker", "--probe-mib", "-1"}, 2, "--probe-mib"},
      {{"status"}, 2, "--nodes"},
      {{"status", "--nodes", "x"}, 2, "is not host:port"},
      {{"bench", "-m", m, "--gen", "-1"}, 2, "--gen"},
      {with(run, {"--comm-port", "7900"}), 2, "--comm-port: only with --nodes"},
      {with(run, {"--nodes", "127.0.0.1:1", "--comm-port", "0"}), 2, "--comm-port: port 0 is not in [1, 65535]"},
      {with(run, {"--nodes", "127.0.0.1:1", "--comm-port", "70000"}), 2, "--comm-port: port 70000 is not in"},
      {with(run, {"--nodes", "127.0.0.1:1", "--comm-port", "7999-7900"}), 2, "--comm-port: range '7999-7900' ends"},
      {with(run, {"--nodes", "127.0.0.1:1", "--comm-port", "x"}), 2, "--comm-port: 'x' is not a port or a range"},
      {with(run, {"--chat", "--nodes", "127.0.0.1:1"}), 2, "--chat: only on this machine"},
      {{"inspect"}, 2, "file"},
      {{"synth", "--preset", "nope", "-o", "/nonexistent/x.gguf"}, 2, "--preset: 'nope' is unknown"},
      {{"synth", "--preset", "llama3.2-1b", "--type", "q9", "-o", "/nonexistent/x.gguf"}, 2, "--type: 'q9'"},
      {{"synth", "--preset", "llama3.2-1b", "--layers", "0", "-o", "/nonexistent/x.gguf"}, 2, "--layers"},
      {{"synth", "--preset", "llama3.2-1b", "--layers", "999", "-o", "/nonexistent/x.gguf"}, 2,
       "--layers: 999 is not in [1, 16]"},
      {{"synth", "--preset", "llama3.2-1b", "-t", "0", "-o", "/nonexistent/x.gguf"}, 2, "--threads"},
      {{"synth", "--preset", "llama3.2-1b", "--seed", "-1", "-o", "/nonexistent/x.gguf"}, 2, "--seed"},
      {{"bench", "dist", "-m", m, "--tp", "0"}, 2, "--tp"},
      {{"bench", "dist", "-m", m, "-t", "0"}, 2, "--threads"},
      {{"bench", "dist", "-m", m, "--seqs", "0"}, 2, "--seqs: 0 is not in [1, 64]"},
      {{"bench", "dist", "-m", m, "--backend", "mpi"}, 2, "--backend"},
      {{"bench", "dist", "-m", m, "--bandwidth", "0"}, 2, "--bandwidth"},
      {{"bench", "dist", "-m", m, "--wire-type", "q4"}, 2, "--wire-type"},
      {{"bench", "dist", "-m", m, "--ep", "2", "--tp", "2"}, 2, "--tp excludes --ep"},
      {{"bench", "dist", "-m", m, "--ep", "2"}, 2, "--ep 2: this llama model has no experts"},
      {{"bench", "dist", "-m", m, "--paired", "3"}, 2, "--paired: the layout has one rank"},
      {{"bench", "dist", "-m", m, "--tp", "2", "--paired", "-1"}, 2, "--paired"},
      {with(run, {"--ep", "2"}), 2, "--ep: only with --nodes"},
      // NaN passes every range comparison: it reached the workers as null and hung the coordinator.
      {with(run, {"--nodes", "127.0.0.1:1", "--peer-timeout", "nan"}), 2, "--peer-timeout: nan is not in [0.1, 3600]"},
      {with(run, {"--nodes", "127.0.0.1:1", "--wire-type", "f64"}), 2, "--wire-type: f64 not in"},
      {with(run, {"--token-file", "/nonexistent"}), 2, "--token-file: only with --nodes"},
      {with(run, {"--wire-type", "f16"}), 2, "--wire-type: only with --nodes"},
      {with(run, {"--chat", "--tp", "2"}), 2, "--tp: only with --nodes"},
      {{"run", "-m", m, "-f", "/tmp"}, 2, "-f: /tmp is a directory"},
      {{"bench", "-m", m, "--tp", "4"}, 2, "--tp: only with --nodes"},
      {{"bench", "-m", m, "--peer-timeout", "nan"}, 2, "--peer-timeout: nan is not in"},
      {{"serve", "-m", m, "--max-body", "-5"}, 2, "--max-body: -5 is not in"},
      {{"serve", "-m", m, "--prefill-step-ratio", "nan"}, 2, "--prefill-step-ratio: nan is not in"},
      {{"serve", "-m", m, "--tp", "2"}, 2, "--tp: only with --nodes"},
      {{"worker", "--cache-max-bytes", "-5"}, 2, "--cache-max-bytes: -5 is not in"},
      {{"worker", "--listen", "127.0.0.1"}, 2, "--listen: '127.0.0.1' is not host:port"},
      {{"worker", "--listen", "localhost:70000"}, 2, "--listen: bad port"},
  };
  for (const auto& c : cases) expect_one_error_line(c);
}

// Paired bursts: the layout's line, and one ratio per pair after the rank lines.
TEST(CliRun, BenchDistPairedPrintsARatioPerPair) {
  const auto r = run_cli({"bench", "dist", "-m", model_path("tiny-random-qwen3moe.gguf"), "--tp", "2", "--gen", "4",
                          "--paired", "3", "--no-kernel-rates"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| tp 2 × pp 1 | 2 × 1 |"), std::string::npos) << r.out;
  const auto at = r.out.find("(paired: 3 bursts of 4 tokens alternated with 1 rank × 2 threads in rank 0's process: tp 2 × pp 1 ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const auto pairs = r.out.find("; per pair: ", at);
  ASSERT_NE(pairs, std::string::npos) << r.out;
  const std::string each = r.out.substr(pairs + 12, r.out.find(')', pairs) - pairs - 12);
  EXPECT_EQ(std::count(each.begin(), each.end(), ' '), 2) << each;  // three ratios
  EXPECT_NE(r.out.find("(rank 1 per step"), std::string::npos) << r.out;
  EXPECT_GT(at, r.out.find("(rank 1 per step")) << "after the rank lines: " << r.out;
}

// Expert parallel over local ranks: the row names the layout, and the
// per-rank breakdown ends with the stage's imbalance.
TEST(CliRun, BenchDistExpertParallel) {
  const auto r = run_cli({"bench", "dist", "-m", model_path("tiny-random-qwen3moe.gguf"), "--ep", "2", "--gen", "8",
                          "--no-kernel-rates"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| ep 2 × pp 1 | 2 × 1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(rank 1 per step: compute"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(stage 0 imbalance: compute per step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(stage 0 routing per step, summed over its MoE layers: "), std::string::npos) << r.out;
}

TEST(CliRun, StdoutCarriesOnlyTheText) {
  // Debug logging, a context beyond training and a warning go to stderr.
  const auto r = run_cli({"--log-level", "debug", "run", "-m", model_path("stories260K.gguf"), "-p", "Once upon a time",
                          "-n", "8", "--temp", "0", "-t", "1", "--no-display-prompt", "-c", "4096"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto golden = read_json(golden_path("stories260K.generate.json"))["cases"][0];
  const std::string full = golden["generated_text_concat_pieces"].get<std::string>();
  EXPECT_NE(r.err.find("[warning] --ctx 4096 is beyond"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("[warning]"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.back(), '\n');
  EXPECT_EQ(full.rfind(r.out.substr(0, r.out.size() - 1), 0), 0u) << r.out;  // a prefix of the golden text
  EXPECT_EQ(r.out.find("Once upon a time"), std::string::npos) << r.out;
}

TEST(CliRun, PromptFromFileOrStdinAndStopStrings) {
  const std::string m = model_path("stories260K.gguf");
  const std::vector<std::string> common = {"-n", "64", "--temp", "0", "-t", "1"};
  auto args = [&](std::vector<std::string> a) {
    a.insert(a.begin(), {"run", "-m", m});
    a.insert(a.end(), common.begin(), common.end());
    return a;
  };
  const auto reference = run_cli(args({"-p", "Once upon a time"}));
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const std::string file = ::testing::TempDir() + "shardlm_prompt." + std::to_string(getpid()) + ".txt";
  std::ofstream(file) << "Once upon a time";
  const auto from_file = run_cli(args({"-f", file}));
  std::remove(file.c_str());
  EXPECT_EQ(from_file.out, reference.out) << from_file.err;
  const auto from_stdin = run_cli(args({"-p", "-"}), 0, "Once upon a time");
  EXPECT_EQ(from_stdin.out, reference.out) << from_stdin.err;
  // A stop string taken from the middle of the reference: the text ends right before it.
  const std::string text = reference.out.substr(std::string("Once upon a time").size());
  const std::string stop = text.substr(text.size() / 2, 6);
  const auto stopped = run_cli(args({"-p", "Once upon a time", "--stop", "zzzz", "--stop", stop}));
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, "Once upon a time" + text.substr(0, text.find(stop)) + "\n");
}

TEST(CliRun, MinusOneRunsToTheEndOfTheContextAndSaysSo) {
  const auto r = run_cli({"run", "-m", model_path("stories260K.gguf"), "-p", "Once upon a time", "-n", "-1", "-c", "24",
                          "--temp", "0", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("note: generation stopped at the end of the context (--ctx 24)"), std::string::npos) << r.err;
}

TEST(CliBench, PrintsOneRowPerThreadCount) {
  const auto r = run_cli({"bench", "-m", model_path("stories260K.gguf"), "-t", "1,2", "--prompt", "16", "--gen", "4",
                          "--bandwidth-mib", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("|       1 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("|       2 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("VmHWM"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" x the file ("), std::string::npos) << r.out;  // the weights' resident bytes
  EXPECT_NE(r.out.find("| matmuls alone tok/s |"), std::string::npos) << r.out;
}

// The cells of the row for `threads` threads in bench -m's table.
std::vector<std::string> bench_row(const std::string& out, int threads) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<std::string> cells;
    std::istringstream row(line);
    for (std::string cell; std::getline(row, cell, '|');) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    if (cells.size() > 1 && cells[0].empty() && cells[1] == std::to_string(threads)) return {cells.begin() + 1, cells.end()};
  }
  return {};
}

// The matrix products alone run for a mixture of experts too, its routed
// experts in the share a step reads.
TEST(CliBench, TimesTheMatrixProductsAloneForAMixtureOfExperts) {
  const auto r = run_cli({"bench", "-m", model_path("tiny-random-qwen3moe.gguf"), "-t", "2", "--prompt", "4", "--gen",
                          "3", "--bandwidth-mib", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto cells = bench_row(r.out, 2);
  ASSERT_EQ(cells.size(), 8u) << r.out;
  EXPECT_GT(std::stod(cells[2]), 0.0) << r.out;  // decode tok/s
  EXPECT_GT(std::stod(cells[6]), 0.0) << r.out;  // matmuls alone tok/s
}

}  // namespace
}  // namespace shardlm::test

namespace shardlm::test {
namespace {

size_t occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// run --chat (-cnv): each line of standard input is a user message; the whole
// conversation is rendered with the chat template and only what the KV cache
// lacks is computed; "/exit" or the end of input ends it.
TEST(CliRun, ChatRendersTheConversationAndReusesTheCache) {
  const std::string m = model_path("stories260K.gguf");
  const std::string tmpl = std::string(shardlm::test_paths::chat_data_dir()) + "/Qwen-Qwen2.5-7B-Instruct.jinja";
  const std::vector<std::string> args = {"--log-level", "debug", "run", "-m", m, "-cnv", "--chat-template-file",
                                         tmpl, "-p", "You are a storyteller.", "--temp", "0", "-n", "24", "-t", "1"};
  const auto chat = run_cli(args, 0, "Hello there\nTell me a story\n/exit\nnever read\n");
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  // Turn 1: the system and user messages and the generation prompt, all new.
  // Turn 2: the same conversation with the reply and the next message; the
  // cache already holds turn 1's prompt and its reply (81 + 24 tokens), all
  // but the reply's last token as the whole text tokenizes again.
  EXPECT_NE(chat.err.find("chat: 81 prompt tokens, 0 of them already in the cache"), std::string::npos) << chat.err;
  EXPECT_NE(chat.err.find("chat: 160 prompt tokens, 104 of them already in the cache"), std::string::npos) << chat.err;
  EXPECT_EQ(occurrences(chat.err, "prompt tokens"), 2u) << chat.err;  // nothing after /exit
  EXPECT_FALSE(chat.out.empty());
  EXPECT_EQ(chat.out.back(), '\n');
  EXPECT_EQ(chat.out.find("<|im_start|>"), std::string::npos) << chat.out;  // replies only, no template text
  // The same conversation again is the same replies; without /exit, the end of input ends it.
  const auto again = run_cli(args, 0, "Hello there\nTell me a story\n");
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, chat.out);
  // CRLF line ends, lines of blanks (no message) and "/exit " are read as a user means them.
  const auto crlf = run_cli(args, 0, "Hello there\r\n  \t\r\nTell me a story\r\n/exit \r\nnever read\r\n");
  ASSERT_EQ(crlf.exit_code, 0) << crlf.err;
  EXPECT_EQ(crlf.out, chat.out);
  EXPECT_EQ(occurrences(crlf.err, "prompt tokens"), 2u) << crlf.err;
}

// A --stop string ends a chat reply right before it, like a run's output.
TEST(CliRun, ChatReplyEndsBeforeAStopString) {
  const std::string m = model_path("stories260K.gguf");
  const std::string tmpl = std::string(shardlm::test_paths::chat_data_dir()) + "/Qwen-Qwen2.5-7B-Instruct.jinja";
  std::vector<std::string> args = {"run", "-m", m, "-cnv", "--chat-template-file", tmpl, "--temp", "0", "-n", "24",
                                   "-t", "1"};
  const auto full = run_cli(args, 0, "Hello there\n");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_GT(full.out.size(), 12u) << full.out;
  const std::string stop = full.out.substr(6, 5);
  ASSERT_EQ(stop.find('\n'), std::string::npos) << full.out;
  args.insert(args.end(), {"--stop", stop});
  const auto stopped = run_cli(args, 0, "Hello there\n");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, full.out.substr(0, full.out.find(stop)) + "\n");
}

// `template` renders what serve would: the model's template, or ChatML (with a
// warning) for a model without one, as serve and run --chat do.
TEST(CliTemplate, RendersWhatServeWould) {
  const std::string request = R"({"messages": [{"role": "user", "content": "hi"}]})";
  const auto chatml = run_cli({"template", "-m", model_path("stories260K.gguf"), "-"}, 0, request);
  EXPECT_EQ(chatml.exit_code, 0) << chatml.err;
  EXPECT_EQ(chatml.out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_NE(chatml.err.find("no tokenizer.chat_template; chats are rendered as ChatML"), std::string::npos) << chatml.err;
  const std::string tmpl = ::testing::TempDir() + "cli_template." + std::to_string(getpid()) + ".jinja";
  {
    std::ofstream out(tmpl);
    out << "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}";
  }
  const auto own = run_cli({"template", "-m", model_path("stories260K.gguf"), "--template-file", tmpl, "-"}, 0, request);
  std::remove(tmpl.c_str());
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(own.out, "[user] hi\n");
}

TEST(CliRun, ChatWithoutInputSaysNothing) {
  const auto r = run_cli({"run", "-m", model_path("stories260K.gguf"), "--chat", "-t", "1"}, 0, "");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace shardlm::test
