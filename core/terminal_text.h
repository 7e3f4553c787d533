// Text that came from a file (events.jsonl reasons, hang reports, provider messages) shown to a
// person on a terminal or pasted into a postmortem. Such text is data, never layout: a reason
// string must not be able to clear the screen, recolour the page, move the cursor or forge a
// line of its own. escape_for_terminal() makes every such byte visible instead.
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace shardguard {

// `text` with every C0 control character (newline and tab included), DEL, C1 control and
// Unicode bidirectional override shown as an escape: ESC -> "\x1b", '\n' -> "\n" (two
// characters), U+202E -> "\u202e"; bytes that are not valid UTF-8 -> "\xNN". Printable UTF-8
// passes unchanged. A backslash is left as it is: the result is for reading, not for parsing.
std::string escape_for_terminal(std::string_view text);

// The same line by line: the newlines between lines stay (a message of several problems, one
// a line), everything else in each line is escaped as above.
std::string escape_lines_for_terminal(std::string_view text);

// JSON text for a terminal that stays the same JSON: DEL, C1 controls and bidirectional
// overrides (which the serializer leaves raw, and which can only stand inside strings) become
// \uXXXX escapes; bytes that are not valid UTF-8 become \u00XX (the text changes there, as
// it would for any reader that needs UTF-8). C0 controls are the serializer's to escape.
std::string escape_json_for_terminal(std::string_view json);

}  // namespace shardguard
