// A guard for JSON that comes from outside (HTTP bodies, cluster peers):
// nlohmann's parser keeps its own stack, but copying, comparing and dumping a
// value recurse once per level of nesting, so a 600 KB body of 300 000 '['
// overflowed the stack of the serve thread that copied its "tools".
#pragma once

#include <string_view>

namespace shardlm {

// Arrays and objects nested deeper than this are refused wherever untrusted
// JSON is read: a chat request's tool schemas nest ~10 levels.
constexpr int kMaxJsonNesting = 128;

// Whether `text` opens more than `max_depth` arrays and objects inside each
// other (brackets inside strings do not count). Looks at the text only: it
// need not be valid JSON, and the parser judges the rest.
bool json_nests_deeper_than(std::string_view text, int max_depth = kMaxJsonNesting);

}  // namespace shardlm
