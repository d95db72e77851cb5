// Tokenizer throughput: vocabulary load time and encode/decode speed on a
// long mixed text, per vocabulary. Prints a table; not a test. Times are
// process CPU time (single-threaded work), so other jobs on a shared machine
// disturb them less than wall-clock time would.
//   bench_tokenizer [models_dir] [repeat_count]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "test_paths.h"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

std::string sample_text(int repeats) {
  const std::string paragraph =
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the park with her "
      "friends. One day, she found 3 shiny stones and 12 red leaves; \"Look!\" she said. It's 2024-05-17, "
      "and the temperature is 21.5 degrees.\n\tCode: for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }\n"
      "Unicode: héllo wörld, naïve café, 日本語のテキスト, 中文, 😀🚀 ❤️ — done.\n\n";
  std::string text;
  for (int i = 0; i < repeats; ++i) text += paragraph;
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : shardlm::test_paths::models_dir();
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 400;
  const char* models[] = {"stories260K.gguf", "vocab/ggml-vocab-llama-spm.gguf", "vocab/ggml-vocab-gpt-2.gguf",
                          "tiny-random-llama-bpe.gguf", "synthetic/tiny-random-qwen2.gguf",
                          "vocab/ggml-vocab-deepseek-llm.gguf", "vocab/ggml-vocab-deepseek-coder.gguf"};
  const std::string text = sample_text(repeats);
  std::printf("text: %zu bytes\n\n", text.size());
  std::printf("| vocabulary | n_vocab | gguf open ms | tokenizer build ms | tokens | encode ms | encode tok/s | encode MB/s | decode ms |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const char* name : models) {
    const std::string path = dir + "/" + name;
    try {
      double t0 = cpu_seconds();
      auto file = shardlm::gguf::File::open(path);
      const double open = cpu_seconds() - t0;
      t0 = cpu_seconds();
      auto tok = shardlm::Tokenizer::from_gguf(*file);
      const double load = cpu_seconds() - t0;
      tok->encode("warm up", true, true);
      t0 = cpu_seconds();
      const auto ids = tok->encode(text, true, true);
      const double enc = cpu_seconds() - t0;
      t0 = cpu_seconds();
      const std::string back = tok->decode(ids);
      const double dec = cpu_seconds() - t0;
      std::printf("| %s | %d | %.1f | %.1f | %zu | %.1f | %.0f | %.2f | %.1f |\n", name, tok->n_vocab(), open * 1e3, load * 1e3,
                  ids.size(), enc * 1e3, double(ids.size()) / enc, double(text.size()) / enc / 1e6, dec * 1e3);
    } catch (const std::exception& e) {
      std::printf("| %s | error: %s |\n", name, e.what());
    }
  }
  return 0;
}
