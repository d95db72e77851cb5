// Parse and render cost of every bundled template for a 20-message
// conversation with tools: per-thread CPU time, best of several rounds.
// usage: bench_chat_template [repeats]
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "chat/template.h"
#include "test_paths.h"

namespace {

double thread_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

nlohmann::ordered_json conversation_of_20() {
  auto conversations = nlohmann::ordered_json::parse(read_file(std::string(shardlm::test_paths::chat_data_dir()) + "/conversations.json"));
  nlohmann::ordered_json tools;
  for (const auto& c : conversations)
    if (c.contains("tools")) tools = c["tools"];
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "system"}, {"content", "You answer in one sentence."}});
  for (int turn = 0; turn < 10; ++turn) {
    messages.push_back({{"role", "user"}, {"content", "Question " + std::to_string(turn) + ": what is RDMA over Thunderbolt 5, and why?"}});
    if (turn < 9)
      messages.push_back({{"role", "assistant"}, {"content", "Remote direct memory access lets one machine read another's memory without its CPU."}});
  }
  return {{"messages", messages}, {"tools", tools}, {"add_generation_prompt", true}, {"bos_token", "<s>"}, {"eos_token", "</s>"}};
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::atoi(argv[1]) : 200;
  nlohmann::ordered_json context = conversation_of_20();
  shardlm::chat::RenderOptions options{shardlm::chat::calendar_date(2026, 7, 26)};
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(shardlm::test_paths::chat_data_dir()))
    if (entry.path().extension() == ".jinja") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::printf("%-45s %10s %10s %8s\n", "template (20 messages + tools)", "parse us", "render us", "bytes");
  for (const auto& path : files) {
    std::string source = read_file(path);
    double best_parse = 1e9, best_render = 1e9;
    size_t bytes = 0;
    for (int round = 0; round < 5; ++round) {
      double t0 = thread_seconds();
      shardlm::chat::Template t(source);
      best_parse = std::min(best_parse, thread_seconds() - t0);
    }
    shardlm::chat::Template t(source);
    try {
      for (int round = 0; round < 5; ++round) {
        double t1 = thread_seconds();
        for (int k = 0; k < repeats; ++k) bytes = t.render(context, options).size();
        best_render = std::min(best_render, (thread_seconds() - t1) / repeats);
      }
      std::printf("%-45s %10.1f %10.1f %8zu\n", path.stem().c_str(), best_parse * 1e6, best_render * 1e6, bytes);
    } catch (const shardlm::chat::TemplateError& e) {
      std::printf("%-45s %10.1f  raises: %s\n", path.stem().c_str(), best_parse * 1e6, e.what());
    }
  }
}
