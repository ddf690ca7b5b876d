#include "ab_serve.h"

#include <algorithm>
#include <cstdlib>
#include <exception>

namespace opf::suites {
namespace {

bool read_line(std::FILE* in, std::string& line) {
  line.clear();
  for (int c; (c = std::fgetc(in)) != EOF;) {
    if (c == '\n') return true;
    line.push_back(char(c));
  }
  return !line.empty();
}

// Replies are one line: a reason with a newline in it would desynchronize the driver.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  return s;
}

void reply(std::FILE* out, const std::string& s) {
  std::fputs(s.c_str(), out);
  std::fputc('\n', out);
  std::fflush(out);
}

}  // namespace

double median_ns(std::vector<double> s) {
  if (s.empty()) return 0;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return (n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2])) * 1e9;
}

int serve_ab(std::FILE* in, std::FILE* out, const ServeTarget& target) {
  std::string line;
  while (read_line(in, line)) {
    const size_t sp = line.find(' ');
    const std::string verb = line.substr(0, sp);
    const std::string rest = sp == std::string::npos ? "" : line.substr(sp + 1);
    try {
      if (verb == "quit") return 0;
      if (verb == "list") {
        for (const std::string& n : target.list()) reply(out, n);
        reply(out, ".");
      } else if (verb == "prepare" && !rest.empty()) {
        const std::string why = target.prepare(rest);
        reply(out, why.empty() ? "ok" : "error " + one_line(why));
      } else if (verb == "restage" && !rest.empty() && target.restage) {
        const std::string why = target.restage(rest);
        reply(out, why.empty() ? "ok" : "error " + one_line(why));
      } else if (verb == "time" && rest.rfind(' ') != std::string::npos) {
        const size_t at = rest.rfind(' ');
        char* end = nullptr;
        const double seconds = std::strtod(rest.c_str() + at + 1, &end);
        if (!(seconds > 0 && seconds < 60) || *end) {
          reply(out, "error time: seconds must be in (0, 60), got '" + rest.substr(at + 1) + "'");
          continue;
        }
        int64_t calls = 0;
        const double ns = target.time(rest.substr(0, at), seconds, calls);
        char buf[64];
        std::snprintf(buf, sizeof buf, "ns %.6g %lld", ns, (long long)calls);
        reply(out, buf);
      } else {
        reply(out, "error unknown request '" + one_line(line) + "'");
      }
    } catch (const std::exception& e) {
      reply(out, "error " + one_line(e.what()));
    }
  }
  return 0;
}

}  // namespace opf::suites
