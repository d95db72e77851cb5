// Unit tests of the Jinja features chat templates use; expected outputs are
// what jinja2 3.1 prints with trim_blocks and lstrip_blocks.
#include <gtest/gtest.h>

#include "chat_test_util.h"

namespace shardlm::chat {
namespace {

using json = nlohmann::ordered_json;

std::string render(std::string_view source, const json& context = json::object()) {
  return Template(source).render(context, testing::golden_options());
}

TEST(ChatWhitespace, TrimBlocksEatsOneNewlineAfterBlockTags) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("{{ 'x' }}\nB"), "x\nB");  // not after {{ }}
  EXPECT_EQ(render("{# note #}\nB"), "B");
}

TEST(ChatWhitespace, LstripBlocksRemovesIndentationBeforeBlockTags) {
  EXPECT_EQ(render("A\n    {% if true %}\n    B\n    {% endif %}\nC"), "A\n    B\nC");
  EXPECT_EQ(render("A\n    {{ 'x' }}"), "A\n    x");  // not before {{ }}
  EXPECT_EQ(render("A  {% if true %}B{% endif %}"), "A  B");  // not after text on the line
}

TEST(ChatWhitespace, MinusAndPlusMarkers) {
  EXPECT_EQ(render("A  \n  {{- 'x' -}}  \n  B"), "AxB");
  EXPECT_EQ(render("A\n  {%- if true -%}\n  B  {%- endif %}"), "AB");
  EXPECT_EQ(render("A\n  {%+ if true %}B{% endif %}"), "A\n  B");
  EXPECT_EQ(render("{% if true +%}\nB{% endif %}"), "\nB");
}

TEST(ChatWhitespace, TrailingNewlineOfTheTemplateIsDropped) {
  EXPECT_EQ(render("A\n"), "A");
  EXPECT_EQ(render("A\n\n"), "A\n");
  EXPECT_EQ(render("A\r\nB"), "A\nB");
}

TEST(ChatExpressions, ArithmeticAndComparison) {
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 % 3 }} {{ 3 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }}"),
            "7 3 2 1.5 2.0 1024");
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ [1, 2] == [1, 2] }} {{ 2 != 2 }}"), "True True True False");
  EXPECT_EQ(render("{{ 'ab' * 2 }} {{ 'a' ~ 1 ~ none }} {{ [1] + [2] }}"), "abab a1None [1, 2]");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e-5 }} {{ 2.5e-3 }} {{ 1e16 }} {{ 123456789.0 }}"),
            "0.30000000000000004 1e+20 1e-05 0.0025 1e+16 123456789.0");
}

TEST(ChatExpressions, LogicReturnsOperandsAndShortCircuits) {
  EXPECT_EQ(render("{{ none or 'b' }} {{ 'a' and 'b' }} {{ '' and undefined_name.x }} {{ not [] }}"), "b b  True");
  EXPECT_EQ(render("{{ 'y' if 1 > 2 else 'n' }} [{{ 'y' if false }}]"), "n []");
}

TEST(ChatExpressions, MembershipAndTests) {
  json ctx = {{"d", {{"k", 1}}}, {"l", {1, "a"}}, {"s", "hello"}};
  EXPECT_EQ(render("{{ 'k' in d }} {{ 'a' in l }} {{ 'ell' in s }} {{ 'z' not in s }} {{ 'x' in nothing }}", ctx),
            "True True True True False");
  EXPECT_EQ(render("{{ d is mapping }} {{ l is iterable }} {{ s is string }} {{ nothing is defined }} "
                   "{{ none is none }} {{ 3 is odd }} {{ 4 is divisibleby 2 }} {{ false is false }} {{ 0 is false }}",
                   ctx),
            "True True True False True True True True False");
  EXPECT_EQ(render("{{ s is not string }} {{ not s is string }} {{ 1 is number }} {{ true is integer }}", ctx),
            "False False True False");
}

TEST(ChatExpressions, SubscriptsSlicesAndAttributes) {
  json ctx = {{"m", {{"role", "user"}, {"items", "field"}}}, {"l", {1, 2, 3, 4}}, {"s", "añb"}};
  EXPECT_EQ(render("{{ m.role }} {{ m['role'] }} {{ m['items'] }} {{ m.missing }}|{{ l[-1] }} {{ l[9] }}|", ctx),
            "user user field |4 |");
  EXPECT_EQ(render("{{ l[1:] }} {{ l[::-1] }} {{ l[:-1] }} {{ l[::2] }} {{ s[::-1] }} {{ s[1] }}", ctx),
            "[2, 3, 4] [4, 3, 2, 1] [1, 2, 3] [1, 3] bña ñ");
  EXPECT_EQ(render("{{ none.x }}|{{ m.role.x }}|{{ l.0 }}", ctx), "||1");
}

TEST(ChatExpressions, UndefinedIsFalsyAndEmptyButFailsOnUse) {
  EXPECT_EQ(render("[{{ nothing }}]{% if not nothing %}falsy{% endif %}{{ nothing | length }}"), "[]falsy0");
  EXPECT_THROW(render("{{ nothing.x }}"), RenderError);
  EXPECT_THROW(render("{{ nothing + 'x' }}"), RenderError);
  EXPECT_THROW(render("{{ nothing() }}"), RenderError);
  EXPECT_THROW(render("{{ 'a' + 1 }}"), RenderError);
  EXPECT_THROW(render("{{ nothing | tojson }}"), RenderError);
}

TEST(ChatStatements, ForLoopVariablesFilterElseAndControls) {
  EXPECT_EQ(render("{% for x in ['a', 'b', 'c'] %}{{ loop.index0 }}{{ loop.index }}{{ x }}"
                   "{{ 'F' if loop.first }}{{ 'L' if loop.last }}{{ loop.length }}{{ loop.revindex }},{% endfor %}"),
            "01aF33,12b32,23cL31,");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.last }}{% endfor %}"), "2False4True");
  EXPECT_EQ(render("{% for x in [] %}x{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}"
                   "{% if x == 4 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for k, v in {'a': 1} | items %}{{ k }}{{ v }}{% endfor %}{% for k in {'z': 0, 'y': 1} %}{{ k }}{% endfor %}"),
            "a1zy");
}

TEST(ChatStatements, ScopingOfSetAndNamespaces) {
  // set inside a loop is local to the iteration (jinja2 prints 01020).
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "01020");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% if true %}{% set x = 'inner' %}{% endif %}{{ x }}"), "inner");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}x{{ 1 + 1 }}{% endset %}[{{ block }}]"), "[x2]");
  EXPECT_THROW(render("{% set d = {} %}{% set d.x = 1 %}"), RenderError);
  json ctx = {{"messages", {1, 2, 3}}};
  EXPECT_EQ(render("{% set messages = messages[1:] %}{{ messages | length }}", ctx), "2");
}

TEST(ChatStatements, MacrosWithDefaultsKeywordsRecursionAndGlobals) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}"),
            "Hi A! Hi B? Hi C.");
  EXPECT_EQ(render("{% macro count(n) %}{{ n }}{% if n > 0 %}{{ count(n - 1) }}{% endif %}{% endmacro %}{{ count(3) }}"),
            "3210");
  EXPECT_EQ(render("{% macro show() %}{% set local = 1 %}{{ top }}{% endmacro %}{% set top = 'T' %}{{ show() }}{{ local }}"),
            "T");
  EXPECT_THROW(render("{% macro loop_forever() %}{{ loop_forever() }}{% endmacro %}{{ loop_forever() }}"), RenderError);
  EXPECT_THROW(render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), RenderError);
}

TEST(ChatFilters, StringFilters) {
  json ctx = {{"s", "  Hello World \n"}};
  EXPECT_EQ(render("[{{ s | trim }}] {{ 'ab' | upper }} {{ 'AB' | lower }} {{ 'hello world' | title }} "
                   "{{ 'hELLO' | capitalize }} {{ 'aXa' | replace('a', 'b') }} {{ 5 | string }} {{ 'x' | safe }}",
                   ctx),
            "[Hello World] AB ab Hello World Hello bXb 5 x");
  EXPECT_EQ(render("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "a\n  b\n\n  c|  a\n  b");
  EXPECT_EQ(render("{{ '42' | int }} {{ 'x' | int }} {{ 3.7 | int }} {{ 2.5 | round }} {{ 2.345 | round(2) }} {{ -3 | abs }}"),
            "42 0 3 2.0 2.35 3");
}

TEST(ChatFilters, SequenceFilters) {
  json ctx = {{"msgs", {{{"role", "user"}, {"n", 1}}, {{"role", "assistant"}, {"n", 2}}, {{"role", "user"}, {"n", 3}}}}};
  EXPECT_EQ(render("{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='n') | list }} "
                   "{{ msgs | rejectattr('role', 'eq', 'user') | length }} {{ msgs | map(attribute='role') | join(', ') }} "
                   "{{ (msgs | first).n }} {{ (msgs | last).n }} {{ [1, 2, 3, 2] | unique | list }} "
                   "{{ ['b', 'a'] | sort }} {{ [1, 2, 3] | reject('equalto', 2) | list }} {{ ['a', 'b'] | map('upper') | join }}",
                   ctx),
            "[1, 3] 1 user, assistant, user 1 3 [1, 2, 3] ['a', 'b'] [1, 3] AB");
  EXPECT_EQ(render("{{ nothing | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 'abc' | list }}"),
            "d  d ['a', 'b', 'c']");
}

TEST(ChatFilters, ToJsonIsPythonJsonDumps) {
  json ctx = {{"v", {{"b", 1}, {"a", {1.5, true, nullptr, "é\"\n\x01"}}, {"e", json::object()}, {"l", json::array()}}}};
  EXPECT_EQ(render("{{ v | tojson }}", ctx), "{\"b\": 1, \"a\": [1.5, true, null, \"é\\\"\\n\\u0001\"], \"e\": {}, \"l\": []}");
  EXPECT_EQ(render("{{ v | tojson(indent=2) }}", ctx),
            "{\n  \"b\": 1,\n  \"a\": [\n    1.5,\n    true,\n    null,\n    \"é\\\"\\n\\u0001\"\n  ],\n  \"e\": {},\n  \"l\": []\n}");
  EXPECT_EQ(render("{{ v.b | tojson }} {{ {'z': 1, 'a': 2} | tojson(sort_keys=true) }} {{ 'é😀' | tojson(ensure_ascii=true) }}",
                   ctx),
            "1 {\"a\": 2, \"z\": 1} \"\\u00e9\\ud83d\\ude00\"");
  EXPECT_EQ(render("{{ [1, 2] | tojson(separators=(',', ':')) }} {{ 1.0 | tojson }}"), "[1,2] 1.0");
}

TEST(ChatMethods, StringDictAndListMethods) {
  EXPECT_EQ(render("{{ 'a</think>b</think>c'.split('</think>')[-1] }} {{ ' a  b '.split() }} {{ 'a,b,c'.split(',', 1) }}"),
            "c ['a', 'b'] ['a', 'b,c']");
  EXPECT_EQ(render("[{{ '\n x \n'.strip() }}][{{ '\nx\n'.lstrip('\n') }}][{{ 'xyy'.rstrip('y') }}] {{ 'abc'.startswith('ab') }} "
                   "{{ 'abc'.endswith(('x', 'c')) }} {{ 'aaa'.replace('a', 'b', 2) }} {{ 'Ab'.upper() }}{{ 'Ab'.lower() }}"),
            "[x][x\n][x] True True bba ABab");
  json ctx = {{"m", {{"role", "user"}}}};
  EXPECT_EQ(render("{{ m.get('role') }} {{ m.get('x') }} {{ m.get('x', 'd') }} {{ m.keys() | list }} {{ m.values() | list }}", ctx),
            "user None d ['role'] ['user']");
  EXPECT_EQ(render("{% set ns = namespace(ids=[]) %}{% set _ = ns.ids.append('a') %}{% set _ = ns.ids.append('b') %}"
                   "{{ ns.ids.pop(0) }}{{ ns.ids }}"),
            "a['b']");
}

TEST(ChatGlobals, StrftimeNowRaiseExceptionRange) {
  EXPECT_EQ(render("{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%B %d, %Y') }}"),
            "26 Jul 2026 2026-07-26 July 26, 2026");
  EXPECT_EQ(render("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1) }}"), "[0, 1, 2] [1, 3, 5] {'a': 1}");
  try {
    render("{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}");
    FAIL() << "no exception";
  } catch (const RaisedError& e) {
    EXPECT_STREQ(e.what(), "Roles must alternate");
  }
}

TEST(ChatValues, PythonStrOfContainers) {
  json ctx = {{"v", {1, "it's", nullptr, true, 1.5, {{"k", "v"}}}}};
  EXPECT_EQ(render("{{ v }}", ctx), "[1, \"it's\", None, True, 1.5, {'k': 'v'}]");
}

TEST(ChatErrors, ParseErrorsNameLineAndColumn) {
  auto parse_error = [](std::string_view source) -> std::pair<int, int> {
    try {
      Template t(source);
    } catch (const ParseError& e) {
      return {e.line, e.column};
    }
    return {0, 0};
  };
  EXPECT_EQ(parse_error("abc\n{% if x %}\nno end"), std::make_pair(3, 7));
  EXPECT_EQ(parse_error("{{ 1 + }}"), std::make_pair(1, 8));
  EXPECT_EQ(parse_error("a\n  {% frobnicate %}"), std::make_pair(2, 6));
  EXPECT_EQ(parse_error("{{ x | nofilter }}"), std::make_pair(1, 8));
  EXPECT_EQ(parse_error("{{ 'unterminated }}"), std::make_pair(1, 4));
  EXPECT_EQ(parse_error("{# never closed"), std::make_pair(1, 1));
  EXPECT_EQ(parse_error("{% break %}"), std::make_pair(1, 4));
  try {
    Template t("{% if %}");
    FAIL();
  } catch (const ParseError& e) {
    EXPECT_NE(std::string(e.what()).find("line 1"), std::string::npos) << e.what();
  }
}

TEST(ChatErrors, RenderErrorsNameTheLine) {
  try {
    render("line one\n{{ 'a' + 1 }}");
    FAIL();
  } catch (const RenderError& e) {
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

TEST(ChatErrors, WalkingANumberNamesTheFilterThatTried) {
  auto message = [](const std::string& source) {
    try {
      render(source);
    } catch (const RenderError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string in_for = message("{% for x in 5 %}{% endfor %}");
  EXPECT_NE(in_for.find("line 1: 'int' object is not iterable"), std::string::npos) << in_for;
  const std::string in_filter = message("{{ 5 | first }}");
  EXPECT_NE(in_filter.find("first: 'int' object is not iterable"), std::string::npos) << in_filter;
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}{{ {'k': 1} | list }}"), "[h][é]['k']");
}

}  // namespace
}  // namespace shardlm::chat
