// The one JSON string escaper. Both modes share one table for ASCII: '"' and '\' escaped, the
// short escapes \n \r \t \b \f, every other control character (0x00-0x1F) and DEL (0x7F) as
// \u00XX. DEL is escaped because Python's json.dumps(ensure_ascii=True) escapes it, and one ASCII
// rule for both modes means no writer prints a raw control byte.
//   utf8:         bytes >= 0x80 are copied as they are (valid UTF-8 JSON; invalid UTF-8 is not
//                 repaired, the bytes pass through).
//   python_ascii: byte-identical to Python's json.dumps(ensure_ascii=True): a UTF-8 sequence
//                 becomes \uXXXX (a surrogate pair above U+FFFF). Input is expected to be valid
//                 UTF-8 (simdjson validated it); a broken sequence is decoded from its lead byte
//                 and whatever continuation bytes follow, never read past the end.
#pragma once

#include <string>
#include <string_view>

namespace opf::json {

enum class Escape { utf8, python_ascii };

// Appends s as a quoted JSON string.
void append_quoted(std::string& out, std::string_view s, Escape mode = Escape::utf8);
std::string quoted(std::string_view s, Escape mode = Escape::utf8);

}  // namespace opf::json
