#include "tokenizer/vocab.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "gguf/gguf.h"
#include "tokenizer/pretokenizer.h"

namespace shardlm::tok {

namespace {

uint32_t attr_of_gguf_type(int64_t type) {
  switch (type) {
    case 1: return kAttrNormal;
    case 2: return kAttrUnknown;
    case 3: return kAttrControl;
    case 4: return kAttrUserDefined;
    case 5: return kAttrUnused;
    case 6: return kAttrByte;
    default: return kAttrUndefined;
  }
}

// Token texts that llama.cpp treats as special whatever their GGUF type says
// (converters often mark them NORMAL). They become CONTROL.
constexpr std::string_view kEotNames[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "<end_of_utterance>"};
constexpr std::string_view kEogNames[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                          "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                          "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                                          "<end_of_utterance>"};
// Fill-in-the-middle markers: all become CONTROL; pad/repo/file-sep also end generation.
constexpr std::string_view kFimMarkerNames[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
    "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>", "\xE2\x96\x81<SUF>", "<|code_suffix|>",
    "<|suffix|>", "<|fim_middle|>", "<fim-middle>", "<fim_middle>",
    "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>", "\xE2\x96\x81<MID>", "<|code_middle|>",
    "<|middle|>"};
constexpr std::string_view kFimEogNames[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]",
                                             "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                             "<reponame>", "<|file_sep|>"};

void read_special_id(const gguf::File& f, const Vocabulary& v, std::string_view key, TokenId& id) {
  const auto value = f.get_i64(key);
  if (!value) return;
  if (*value < 0 || *value >= v.size()) {
    // 0xFFFFFFFF ("none") is common; llama.cpp also keeps the default then.
    if (*value != 0xFFFFFFFFll && *value != -1)
      spdlog::warn("{}: {} = {} is not a token id (vocabulary of {}); ignored", v.source, key, *value, v.size());
    return;
  }
  id = TokenId(*value);
}

void load_texts(const gguf::File& f, Vocabulary& v) {
  auto texts = f.get_string_array("tokenizer.ggml.tokens");
  if (!texts) throw Error(fmt::format("{}: missing metadata key 'tokenizer.ggml.tokens'", f.path()));
  if (texts->empty()) throw Error(fmt::format("{}: tokenizer.ggml.tokens is empty", f.path()));
  if (texts->size() > size_t(std::numeric_limits<TokenId>::max()))
    throw Error(fmt::format("{}: tokenizer.ggml.tokens has too many entries", f.path()));
  const size_t n = texts->size();
  const auto scores = f.get_f32_array("tokenizer.ggml.scores");
  const auto types = f.get_int_array("tokenizer.ggml.token_type");
  if (types && types->size() != n)
    throw Error(fmt::format("{}: tokenizer.ggml.token_type has {} entries for {} tokens", f.path(), types->size(), n));
  v.tokens.resize(n);
  for (size_t i = 0; i < n; ++i) {
    TokenInfo& t = v.tokens[i];
    t.text = std::move((*texts)[i]);
    if (t.text.empty()) t.text = "[EMPTY_" + std::to_string(i) + "]";
    t.score = scores && i < scores->size() ? (*scores)[i] : 0.0f;
    t.attr = types ? attr_of_gguf_type((*types)[i]) : kAttrNormal;
  }
  v.text_index.build(v.tokens);
}

void force_control(Vocabulary& v, TokenId id) {
  if (!v.has_attr(id, kAttrControl)) {
    spdlog::debug("{}: token {} '{}' treated as a control token", v.source, id, v.tokens[size_t(id)].text);
    v.tokens[size_t(id)].attr |= kAttrControl;
  }
}

void apply_name_rules(Vocabulary& v, bool has_eot_key, bool has_eom_key) {
  for (std::string_view name : kEotNames) {
    const TokenId id = v.find(name);
    if (id < 0) continue;
    if (!has_eot_key && v.eot < 0) v.eot = id;
    if (id == v.eot) force_control(v, id);
  }
  if (!has_eom_key && v.eom < 0) v.eom = v.find("<|eom_id|>");
  if (v.eom >= 0) force_control(v, v.eom);
  for (std::string_view name : kFimMarkerNames)
    if (TokenId id = v.find(name); id >= 0) force_control(v, id);
  for (std::string_view name : kFimEogNames)
    if (TokenId id = v.find(name); id >= 0) {
      force_control(v, id);
      v.end_of_generation.insert(id);
    }
  for (auto& t : v.tokens)
    if ((t.attr & kAttrControl) && t.text.find("unused") != std::string::npos) t.attr |= kAttrUnused;
  for (std::string_view name : kEogNames)
    if (TokenId id = v.find(name); id >= 0) {
      force_control(v, id);
      v.end_of_generation.insert(id);
    }
  // gpt-oss channel markers are always rendered as text.
  for (std::string_view name : {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"})
    if (TokenId id = v.find(name); id >= 0) v.tokens[size_t(id)].attr = kAttrUserDefined;
  for (TokenId id : {v.eos, v.eot, v.eom})
    if (id >= 0) v.end_of_generation.insert(id);
}

}  // namespace

void TextIndex::build(const std::vector<TokenInfo>& tokens) {
  size_t capacity = 16;
  while (capacity < tokens.size() * 2) capacity *= 2;
  slots_.assign(capacity, Slot{0, -1});
  mask_ = capacity - 1;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view text = tokens[id].text;
    const size_t h = TextHash{}(text);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& slot = slots_[i];
      if (slot.id < 0) {
        slot = {uint32_t(h), TokenId(id)};
        break;
      }
      if (slot.hash == uint32_t(h) && tokens[size_t(slot.id)].text == text) {
        slot.id = TokenId(id);
        break;
      }
    }
  }
}

TokenId TextIndex::find(std::string_view text, const std::vector<TokenInfo>& tokens) const {
  if (slots_.empty()) return -1;
  const size_t h = TextHash{}(text);
  for (size_t i = h & mask_;; i = (i + 1) & mask_) {
    const Slot& slot = slots_[i];
    if (slot.id < 0) return -1;
    if (slot.hash == uint32_t(h) && tokens[size_t(slot.id)].text == text) return slot.id;
  }
}

Vocabulary Vocabulary::load(const gguf::File& f) {
  Vocabulary v;
  v.source = f.path();
  const std::string model = f.require_string("tokenizer.ggml.model");
  if (model == "llama") {
    v.kind = VocabKind::Spm;
  } else if (model == "gpt2") {
    v.kind = VocabKind::Bpe;
  } else {
    throw Error(
        fmt::format("{}: tokenizer.ggml.model '{}' is not supported (expected 'llama' or 'gpt2')", f.path(), model));
  }
  v.pre = f.get_string("tokenizer.ggml.pre").value_or("");
  load_texts(f, v);

  if (v.kind == VocabKind::Spm) {
    v.bos = 1, v.eos = 2, v.unk = 0;
    v.add_space_prefix = true, v.add_bos = true, v.add_eos = false, v.clean_spaces = false;
  } else {
    v.bos = 11, v.eos = 11;  // llama.cpp's defaults for gpt2 vocabularies
    const PreTokenizerSpec spec = pre_tokenizer_spec(v.pre);
    v.clean_spaces = spec.clean_spaces;
    v.ignore_merges = spec.ignore_merges;
    v.add_bos = spec.add_bos;
    auto merges = f.get_string_array("tokenizer.ggml.merges");
    if (!merges)
      throw Error(
          fmt::format("{}: missing metadata key 'tokenizer.ggml.merges' (needed by gpt2 vocabularies)", f.path()));
    v.merges = std::move(*merges);
  }
  v.add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix").value_or(v.add_space_prefix);

  read_special_id(f, v, "tokenizer.ggml.bos_token_id", v.bos);
  read_special_id(f, v, "tokenizer.ggml.eos_token_id", v.eos);
  read_special_id(f, v, "tokenizer.ggml.eot_token_id", v.eot);
  read_special_id(f, v, "tokenizer.ggml.eom_token_id", v.eom);
  read_special_id(f, v, "tokenizer.ggml.unknown_token_id", v.unk);
  read_special_id(f, v, "tokenizer.ggml.padding_token_id", v.pad);
  for (TokenId* id : {&v.bos, &v.eos, &v.unk})  // defaults may not fit a small vocabulary
    if (*id >= v.size()) *id = -1;
  v.add_bos = f.get_bool("tokenizer.ggml.add_bos_token").value_or(v.add_bos);
  v.add_eos = f.get_bool("tokenizer.ggml.add_eos_token").value_or(v.add_eos);

  apply_name_rules(v, f.has("tokenizer.ggml.eot_token_id"), f.has("tokenizer.ggml.eom_token_id"));

  for (TokenId id = 0; id < v.size(); ++id)
    if (v.has_attr(id, kAttrControl | kAttrUserDefined | kAttrUnknown)) v.special_by_length.push_back(id);
  std::stable_sort(v.special_by_length.begin(), v.special_by_length.end(), [&](TokenId a, TokenId b) {
    return v.tokens[size_t(a)].text.size() > v.tokens[size_t(b)].text.size();
  });

  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof hex, "<0x%02X>", b);
    TokenId id = v.find(hex);
    if (id < 0) id = v.find(std::string(1, char(b)));
    v.byte_token[size_t(b)] = id;
  }
  return v;
}

}  // namespace shardlm::tok
