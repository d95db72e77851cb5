#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <stdexcept>

#include "core/error.h"
#include "tokenizer/unicode_text.h"

namespace shardlm::tok {

namespace {

// Regex lists per pre-tokenizer, as published in llama.cpp's
// llama-vocab.cpp (llm_tokenizer_bpe). `\s` and `\S` are expanded below.
const char* const kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
const char* const kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* const kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
// DeepSeek LLM's "letters": the cased-letter (L&) ranges of its HF tokenizer.
const char* const kDeepseekLetters =
    R"(A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943})";
const char* const kDeepseekPunct = R"(\x{21}-\x{2F}\x{3A}-\x{7E}\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002})";
const char* const kDeepseekCjk = R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";

// llama.cpp matches \s against Unicode White_Space in every regex (its
// collapsed-text trick maps other whitespace to \v), which PCRE2's own \s
// does not quite do; spell the set out.
const char* const kWhiteSpace =
    R"(\t\n\x{0B}\f\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

std::string expand_whitespace_classes(std::string_view pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[++i];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S') {
        throw std::logic_error("pre-tokenizer regex: \\S inside a class is not supported");
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

bool any_of_names(std::string_view pre, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), pre) != names.end();
}

}  // namespace

PreTokenizerSpec pre_tokenizer_spec(std::string_view pre) {
  PreTokenizerSpec s;
  if (any_of_names(pre, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2"})) {
    s = {"llama3", {kLlama3}, true, true, true, true};
  } else if (any_of_names(pre, {"dbrx", "smaug-bpe"})) {
    s = {std::string(pre), {kLlama3}, true, false, false, true};
  } else if (pre == "deepseek-llm") {
    s = {"deepseek-llm",
         {"[\r\n]", std::string(R"(\s?[)") + kDeepseekLetters + "]+", std::string(R"(\s?[)") + kDeepseekPunct + "]+",
          R"(\s+$)", kDeepseekCjk, R"(\p{N}+)"},
         false, false, false, true};
  } else if (pre == "deepseek-coder") {
    s = {"deepseek-coder", {"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kDeepseekCjk, R"(\p{N})"}, false, false, false, true};
  } else if (any_of_names(pre, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de",
                                "a.x-4.0", "mellum", "modern-bert", "mpt", "olmo", "jais", "exaone4"})) {
    s = {"gpt-2", {kGpt2}, true, false, false, true};
  } else if (any_of_names(pre, {"qwen2", "deepseek-r1-qwen", "kormo"})) {
    s = {"qwen2", {kQwen2}, false, false, false, true};
  } else if (any_of_names(pre, {"stablelm2", "megrez"})) {
    s = {"qwen2", {kQwen2}, true, false, false, true};
  } else if (any_of_names(pre, {"starcoder", "refact", "smollm", "codeshell", "exaone", "minerva-7b", "command-r"})) {
    const bool clean = !any_of_names(pre, {"smollm", "command-r"});
    s = {std::string(pre), {R"(\p{N})", kGpt2}, clean, false, false, true};
  } else if (pre == "falcon") {
    s = {"falcon", {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}, true, false, false, true};
  } else {
    s = {"default", {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}, true, false, false,
         pre == "default"};
  }
  return s;
}

struct PreTokenizer::Regex {
  pcre2_code* code = nullptr;
  ~Regex() { pcre2_code_free(code); }
};

PreTokenizer::PreTokenizer(const PreTokenizerSpec& spec) {
  for (const auto& source : spec.regexes) {
    const std::string pattern = expand_whitespace_classes(source);
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    auto re = std::make_unique<Regex>();
    // DOLLAR_ENDONLY: `$` means the end of the piece, not "before a final \n".
    re->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                             PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &error_offset, nullptr);
    if (!re->code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof message);
      throw std::logic_error(fmt::format("pre-tokenizer '{}': regex does not compile at offset {}: {}", spec.name,
                                         error_offset, reinterpret_cast<const char*>(message)));
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE);  // the interpreter stays as fallback
    regexes_.push_back(std::move(re));
  }
}

PreTokenizer::~PreTokenizer() = default;

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  if (text.size() > (size_t(1) << 30))  // offsets below are 32-bit and UTF-8 may grow 3x
    throw Error(fmt::format("tokenizer: text of {} bytes is too long to tokenize (max 1 GiB)", text.size()));
  const std::vector<uint32_t> cps = text::decode_utf8_lenient(text);
  // PCRE2 needs valid UTF-8: surrogates and values past U+10FFFF (which the
  // lenient decoder lets through) are matched as U+FFFD, a symbol like them.
  std::string subject;
  subject.reserve(text.size() + 8);
  std::vector<uint32_t> byte_of_cp(cps.size() + 1);
  for (size_t i = 0; i < cps.size(); ++i) {
    byte_of_cp[i] = uint32_t(subject.size());
    const uint32_t cp = cps[i];
    text::append_utf8(subject, (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF ? 0xFFFD : cp);
  }
  byte_of_cp[cps.size()] = uint32_t(subject.size());
  std::vector<uint32_t> cp_of_byte(subject.size() + 1, 0);
  for (size_t i = 0; i <= cps.size(); ++i) cp_of_byte[byte_of_cp[i]] = uint32_t(i);

  std::vector<size_t> ends{cps.size()};  // pieces as end offsets, in code points
  for (const auto& re : regexes_) {
    std::vector<size_t> next;
    next.reserve(ends.size() * 2);
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    size_t piece_begin = 0;
    for (const size_t piece_end : ends) {
      const size_t base = byte_of_cp[piece_begin];
      const size_t len = byte_of_cp[piece_end] - base;
      const auto* p = reinterpret_cast<PCRE2_SPTR>(subject.data() + base);
      size_t pos = 0, last = 0;
      while (pos < len) {
        int rc = pcre2_match(re->code, p, len, pos, PCRE2_NO_UTF_CHECK, md, nullptr);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH)  // e.g. JIT stack exhausted: retry interpreted
          rc = pcre2_match(re->code, p, len, pos, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          throw Error(fmt::format("tokenizer: pre-tokenizer regex failed (PCRE2 error {}) at byte {} of the text", rc,
                                  base + pos));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t s = ov[0], e = ov[1];
        if (e == s) {  // an empty match cuts nothing; look further on
          pos = s + text::utf8_sequence_length(uint8_t(subject[base + s]));
          continue;
        }
        if (s > last) next.push_back(cp_of_byte[base + s]);
        next.push_back(cp_of_byte[base + e]);
        last = pos = e;
      }
      if (last < len) next.push_back(piece_end);
      piece_begin = piece_end;
    }
    pcre2_match_data_free(md);
    ends = std::move(next);
  }

  std::vector<std::string> words;
  words.reserve(ends.size());
  size_t begin = 0;
  for (const size_t end : ends) {
    std::string w;
    for (size_t i = begin; i < end; ++i) text::append_utf8(w, cps[i]);
    words.push_back(std::move(w));
    begin = end;
  }
  return words;
}

}  // namespace shardlm::tok
