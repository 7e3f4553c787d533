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

}  // namespace shardguard
