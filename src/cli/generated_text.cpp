#include "cli/generated_text.h"

#include <cstdio>

namespace shardlm::cli {

GeneratedText::GeneratedText(const Tokenizer& tokenizer, std::vector<std::string> stops, bool display_prompt)
    : tokenizer_(tokenizer), decoder_(tokenizer, /*at_sequence_start=*/false), stops_(std::move(stops)),
      display_prompt_(display_prompt) {}

void GeneratedText::print(const std::string& text) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
}

void GeneratedText::begin(const std::string& prompt) {
  if (display_prompt_) print(prompt);
}

bool GeneratedText::push(TokenId token) {
  if (ended_) return false;
  if (tokenizer_.is_end_of_generation(token)) {
    ended_ = true;
    return false;
  }
  print(stops_.push(decoder_.push(token)));
  ended_ = stops_.stopped();
  return !ended_;
}

void GeneratedText::end() {
  if (!stops_.stopped()) {
    print(stops_.push(decoder_.flush()));
    print(stops_.flush());
  }
  print("\n");
}

}  // namespace shardlm::cli
