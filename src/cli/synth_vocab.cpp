#include <fmt/format.h>
#include <unordered_set>

#include "cli/synth.h"
#include "core/error.h"

namespace shardlm::cli::synth {
namespace {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

// GPT-2's reversible byte → printable code point map: printable Latin-1 bytes
// stand for themselves, the others take code points from 256 upwards.
std::vector<std::string> byte_tokens() {
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    out[b] = utf8(printable ? b : next++);
  }
  return out;
}

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::shared_ptr<gguf::Array> array(gguf::ValueType t, std::vector<gguf::Value> items) {
  auto a = std::make_shared<gguf::Array>();
  a->type = t;
  a->items = std::move(items);
  return a;
}

}  // namespace

void set_generated_vocab(gguf::Writer& w, const Preset& p, int64_t n_vocab, uint64_t seed) {
  constexpr int kSpecial = 2;
  if (n_vocab < 256 + kSpecial) throw Error("synth: a generated vocabulary needs at least 258 tokens");
  std::vector<std::string> tokens = byte_tokens();
  std::unordered_set<std::string> known(tokens.begin(), tokens.end());
  std::vector<gguf::Value> merges;
  // Merge pieces: letters, and letters after a space (Ġ), like real text.
  std::vector<size_t> letters;
  for (unsigned char c = 'a'; c <= 'z'; ++c) letters.push_back(c);
  letters.push_back(' ');
  uint64_t state = seed ^ 0x5EEDB0CAull;
  size_t attempts = 0;
  while (int64_t(tokens.size()) < n_vocab - kSpecial) {
    if (++attempts > size_t(n_vocab) * 64) throw Error("synth: could not generate enough distinct merges");
    // Left: any earlier merge or a letter; right: a letter. Choosing among
    // all earlier merges keeps collisions rare even for 150k-token vocabularies.
    const uint64_t r = splitmix(state);
    const size_t merged = tokens.size() - 256;
    size_t left;
    if (merged > 0 && (r & 3) != 0) left = 256 + (r >> 8) % merged;
    else left = letters[(r >> 8) % letters.size()];
    const size_t right = letters[(r >> 40) % (letters.size() - 1)];  // never a space on the right
    const std::string token = tokens[left] + tokens[right];
    if (token.size() > 24 || !known.insert(token).second) continue;
    merges.emplace_back(tokens[left] + " " + tokens[right]);
    tokens.push_back(token);
  }
  const bool llama3 = p.pre_tokenizer == "llama-bpe";
  tokens.push_back(llama3 ? "<|begin_of_text|>" : "<|endoftext|>");
  tokens.push_back(llama3 ? "<|end_of_text|>" : "<|im_end|>");

  std::vector<gguf::Value> token_values, types;
  token_values.reserve(tokens.size());
  types.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    token_values.emplace_back(std::move(tokens[i]));
    types.emplace_back(int32_t(int64_t(i) >= n_vocab - kSpecial ? 3 : 1));  // 3 = control, 1 = normal
  }
  w.set("tokenizer.ggml.model", std::string("gpt2"));
  w.set("tokenizer.ggml.pre", p.pre_tokenizer);
  w.set("tokenizer.ggml.tokens", array(gguf::ValueType::STRING, std::move(token_values)));
  w.set("tokenizer.ggml.token_type", array(gguf::ValueType::INT32, std::move(types)));
  w.set("tokenizer.ggml.merges", array(gguf::ValueType::STRING, std::move(merges)));
  w.set("tokenizer.ggml.bos_token_id", uint32_t(n_vocab - 2));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(n_vocab - 1));
  w.set("tokenizer.ggml.add_bos_token", p.add_bos);
}

int64_t copy_vocab(gguf::Writer& w, const gguf::File& from) {
  for (const auto& [key, value] : from.metadata())
    if (key.rfind("tokenizer.", 0) == 0) w.set(key, value);
  const auto tokens = from.find("tokenizer.ggml.tokens");
  const auto* a = tokens ? std::get_if<std::shared_ptr<gguf::Array>>(tokens) : nullptr;
  if (!a || (*a)->type != gguf::ValueType::STRING || (*a)->items.empty())
    throw Error(fmt::format("{}: --vocab-from: no tokenizer.ggml.tokens string array", from.path()));
  return int64_t((*a)->items.size());
}

}  // namespace shardlm::cli::synth
