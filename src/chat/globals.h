// The functions every template sees: raise_exception, strftime_now,
// namespace, range, dict (the globals Hugging Face and jinja2 provide).
#pragma once

#include "chat/interpreter.h"

namespace shardlm::chat {

void add_globals(Frame& frame);

}  // namespace shardlm::chat
