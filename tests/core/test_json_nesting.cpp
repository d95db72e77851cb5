#include "core/json_nesting.h"

#include <gtest/gtest.h>

#include <string>

namespace shardlm {
namespace {

std::string nested(int depth, char open = '[', char close = ']') {
  return std::string(size_t(depth), open) + std::string(size_t(depth), close);
}

TEST(JsonNesting, CountsArraysAndObjectsInsideEachOther) {
  EXPECT_FALSE(json_nests_deeper_than(nested(3), 3));
  EXPECT_TRUE(json_nests_deeper_than(nested(4), 3));
  EXPECT_FALSE(json_nests_deeper_than(R"({"a": [{"b": {}}], "c": [[]]})", 4));
  EXPECT_TRUE(json_nests_deeper_than(R"({"a": [{"b": {"d": []}}]})", 4));
  // Siblings do not add up.
  EXPECT_FALSE(json_nests_deeper_than("[" + nested(2) + "," + nested(2) + "," + nested(2) + "]", 3));
}

TEST(JsonNesting, BracketsInsideStringsDoNotCount) {
  EXPECT_FALSE(json_nests_deeper_than(R"(["[[[[{{{{", "]]]"])", 1));
  // An escaped quote does not end the string; an escaped backslash does not escape the quote after it.
  EXPECT_FALSE(json_nests_deeper_than(R"(["\"[[[[", "x"])", 1));
  EXPECT_TRUE(json_nests_deeper_than(R"(["\\", [[]]])", 2));
}

TEST(JsonNesting, AnyTextIsLookedAtSafely) {
  EXPECT_FALSE(json_nests_deeper_than("", 0));
  EXPECT_FALSE(json_nests_deeper_than("]]]}}}", 0));
  EXPECT_FALSE(json_nests_deeper_than("\"unterminated [[[[", 0));
  EXPECT_FALSE(json_nests_deeper_than("\"ends in a backslash\\", 0));
  EXPECT_TRUE(json_nests_deeper_than(std::string(300000, '['), kMaxJsonNesting));
}

}  // namespace
}  // namespace shardlm
