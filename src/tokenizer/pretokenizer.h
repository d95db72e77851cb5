// Byte-level BPE pre-tokenization: the text is cut into pre-tokens by a list
// of regexes applied in sequence (each one splits every piece the previous
// ones produced; text no regex matches stays a piece of its own), as
// llama.cpp does for each `tokenizer.ggml.pre` value.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace shardlm::tok {

struct PreTokenizerSpec {
  std::string name;                 // canonical name ("default", "gpt-2", "llama3", ...)
  std::vector<std::string> regexes;  // PCRE2 syntax, before \s expansion
  bool clean_spaces = true;
  bool ignore_merges = false;
  bool add_bos = false;
  bool known = true;  // false: the name was not recognised and "default" was used
};

// llama.cpp's choice for a tokenizer.ggml.pre value; an unknown or empty name
// gets the default regexes (llama.cpp warns and does the same).
PreTokenizerSpec pre_tokenizer_spec(std::string_view pre);

class PreTokenizer {
 public:
  explicit PreTokenizer(const PreTokenizerSpec& spec);
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Pre-tokens of `text` as raw bytes. Invalid UTF-8 bytes become U+FFFD.
  std::vector<std::string> split(std::string_view text) const;

 private:
  struct Regex;
  std::vector<std::unique_ptr<Regex>> regexes_;
};

}  // namespace shardlm::tok
