// A thinking model's reasoning, apart from its answer: what Qwen3, QwQ,
// DeepSeek-R1 and V3.1 and SmolLM3 write between <think> and </think> before
// they answer goes to the OpenAI API's message.reasoning_content (as
// DeepSeek's API and llama-server send it), the rest to message.content.
// Where the prompt ends inside an open <think> (the R1 distills and QwQ put
// one in the generation prompt), the reply begins in the reasoning.
//
// The reasoning loses its blank ends, and the answer the blanks before it; a
// reply cut short inside the reasoning has only reasoning. A reply that does
// not begin with <think> (after blanks) is all content, unchanged.
#pragma once

#include <string>
#include <string_view>

namespace shardlm::serve {

// The template writes think tags: its replies are read for reasoning.
bool template_thinks(std::string_view template_source);

// The rendered prompt ends inside a think block the reply will close.
bool prompt_opens_thinking(std::string_view rendered_prompt);

struct ReasonedReply {
  std::string reasoning;
  std::string content;
};

ReasonedReply split_reasoning(std::string_view reply, bool starts_thinking);

// The same split of a reply that arrives in pieces: each push gives what is
// surely reasoning or content so far (a piece that may begin a tag, or blanks
// that may end the reasoning, wait); the outputs of all pushes and of
// finish() concatenate to split_reasoning's of the whole reply.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_thinking);
  ReasonedReply push(std::string_view text);
  ReasonedReply finish();

 private:
  enum class State { Start, Thinking, Answer };
  State state_;
  std::string held_;               // text not yet given out
  bool reasoning_begun_ = false;   // non-blank reasoning went out
  bool answer_begun_ = false;      // non-blank content went out
};

}  // namespace shardlm::serve
