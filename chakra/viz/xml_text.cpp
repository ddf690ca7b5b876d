#include "viz_writers.h"

namespace opf::chakra::viz {

std::string xml_text(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    const uint8_t u = uint8_t(c);
    if (c == '&') o += "&amp;";
    else if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '"') o += "&quot;";
    else if (c == '\'') o += "&apos;";
    else if (c == '\n') o += "&#10;";  // kept in attribute values, where a raw newline becomes a space
    else if (c == '\t') o += "&#9;";
    else if (u < 0x20) o += "\xef\xbf\xbd";
    else if (u == 0xef && i + 2 < s.size() && uint8_t(s[i + 1]) == 0xbf && (uint8_t(s[i + 2]) & 0xfe) == 0xbe)
      o += "\xef\xbf\xbd", i += 2;  // U+FFFE, U+FFFF
    else o += c;
  }
  return o;
}

}  // namespace opf::chakra::viz
