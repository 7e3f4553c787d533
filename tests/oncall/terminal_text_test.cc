// escape_for_terminal: text from files shown to people cannot drive the terminal or forge
// a line.
#include "core/terminal_text.h"

#include <catch2/catch.hpp>

using shardguard::escape_for_terminal;
using shardguard::escape_json_for_terminal;
using shardguard::escape_lines_for_terminal;

TEST_CASE("Control characters, ANSI escapes and bidi overrides become visible",
          "[terminal_text][unit]") {
  auto [in, out] = GENERATE(table<std::string, std::string>({
      {"plain text, 100 %", "plain text, 100 %"},
      {"a\nb", "a\\nb"},
      {"a\r\nb\tc", "a\\r\\nb\\tc"},
      {"\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"},
      {"\x1b]0;title\x07", "\\x1b]0;title\\x07"},
      {std::string("nul\0byte", 8), "nul\\x00byte"},
      {"del\x7f", "del\\x7f"},
      {"c1 \xc2\x9b"
       "2J",
       "c1 \\u009b2J"},  // U+009B: the 8-bit CSI
      {"abc \xe2\x80\xae"
       "cba",
       "abc \\u202ecba"},  // RIGHT-TO-LEFT OVERRIDE
      {"\xe2\x81\xa6x\xe2\x81\xa9", "\\u2066x\\u2069"},
      {"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80", "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x9a\x80"},
      {"bad \xff\xfe", "bad \\xff\\xfe"},
      {"overlong \xc0\xaf", "overlong \\xc0\\xaf"},
      {"torn \xe2\x82", "torn \\xe2\\x82"},
      {"surrogate \xed\xa0\x80", "surrogate \\xed\\xa0\\x80"},
      {"back\\slash", "back\\slash"},
  }));
  CHECK(escape_for_terminal(in) == out);
}

TEST_CASE("No byte below 0x20 survives, whatever the input", "[terminal_text][unit]") {
  std::string all;
  for (int c = 0; c < 256; ++c) all += static_cast<char>(c);
  const std::string e = escape_for_terminal(all + all);
  size_t controls = 0;
  for (unsigned char c : e) controls += (c < 0x20 || c == 0x7f) ? 1 : 0;
  CHECK(controls == 0);
}

TEST_CASE("A message of several lines keeps its line breaks, each line escaped",
          "[terminal_text][unit]") {
  CHECK(escape_lines_for_terminal("job.toml:3: \x1b[2Jbad\njob.toml:4: ok") ==
        "job.toml:3: \\x1b[2Jbad\njob.toml:4: ok");
  CHECK(escape_lines_for_terminal("") == "");
  CHECK(escape_lines_for_terminal("a\n") == "a\n");
}

TEST_CASE("JSON for a terminal stays JSON: DEL, C1 and bidi overrides become \\u escapes",
          "[terminal_text][unit]") {
  // What a serializer leaves raw inside a string: DEL, a C1 CSI, RIGHT-TO-LEFT OVERRIDE.
  CHECK(escape_json_for_terminal("{\"name\":\"a\x7f"
                                 "b\xc2\x9b"
                                 "c\xe2\x80\xae"
                                 "d\"}") == "{\"name\":\"a\\u007fb\\u009bc\\u202ed\"}");
  CHECK(escape_json_for_terminal("{\"w\":\"caf\xc3\xa9\",\"n\":[1,2]}") ==
        "{\"w\":\"caf\xc3\xa9\",\"n\":[1,2]}");
  CHECK(escape_json_for_terminal("\"\xff\"") == "\"\\u00ff\"");
}
