#include "astra_log.h"

#include <cctype>
#include <limits>

#include "byte_source.h"
#include "input_error.h"

namespace opf::chakra {

namespace {

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> v;
  for (size_t start = 0;;) {
    size_t k = s.find(sep, start);
    v.push_back(s.substr(start, k == std::string_view::npos ? std::string_view::npos : k - start));
    if (k == std::string_view::npos) return v;
    start = k + 1;
  }
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view strip(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Python's int(str) for what fits int64: blanks around, a sign, digits with single '_' between.
bool py_int(std::string_view s, int64_t& out) {
  s = strip(s);
  bool neg = false;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) neg = s[0] == '-', s.remove_prefix(1);
  if (s.empty() || s.front() == '_' || s.back() == '_') return false;
  uint64_t v = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    if (s[k] == '_') {
      if (s[k - 1] == '_') return false;
      continue;
    }
    if (s[k] < '0' || s[k] > '9') return false;
    if (v > (uint64_t(INT64_MAX) - uint64_t(s[k] - '0')) / 10) return false;
    v = v * 10 + uint64_t(s[k] - '0');
  }
  out = neg ? -int64_t(v) : int64_t(v);
  return true;
}

template <class F>
void for_each_line(const std::string& path, F&& f) {
  const std::string text = read_all(path);
  size_t line = 0;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    f(std::string_view(text).substr(start, end - start), ++line);
    start = end + 1;
  }
}

[[noreturn]] void fail(const std::string& path, size_t line, const std::string& problem) {
  throw InputError(path + ":" + std::to_string(line), "", problem);
}

}  // namespace

std::vector<LogEvent> read_astra_log_reference(const std::string& path) {
  std::vector<LogEvent> out;
  for_each_line(path, [&](std::string_view raw, size_t line) {
    if (raw.find("issue") == std::string_view::npos && raw.find("callback") == std::string_view::npos) return;
    const auto cols = split(strip(raw), ',');
    LogEvent e;
    e.line = line;
    auto value = [&](size_t col, const char* what) {
      if (col >= cols.size()) fail(path, line, std::string("no ") + what + " column (the reference's IndexError)");
      auto parts = split(cols[col], '=');
      if (parts.size() < 2) fail(path, line, std::string("no '=' in the ") + what + " column");
      return parts[1];
    };
    auto number = [&](size_t col, const char* what) {
      int64_t v;
      if (!py_int(value(col, what), v)) fail(path, line, std::string(what) + " is not an integer");
      return v;
    };
    e.npu = number(1, "sys->id");
    e.tick = number(2, "tick");
    e.node = number(3, "node->id");
    e.name = std::string(value(4, "node->name"));
    if (cols[0] == "issue") e.callback = false;
    else if (cols[0] == "callback") e.callback = true;
    else fail(path, line, "unsupported trace type '" + std::string(cols[0]) + "' (only issue, callback)");
    out.push_back(std::move(e));
  });
  return out;
}

std::vector<LogEvent> read_astra_log(const std::string& path) {
  std::vector<LogEvent> out;
  for_each_line(path, [&](std::string_view raw, size_t line) {
    std::string_view s = raw;
    while (!s.empty() && (s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    size_t at = std::string_view::npos;
    for (std::string_view kw : {"issue,", "callback,"})
      for (size_t k = s.find(kw); k != std::string_view::npos; k = s.find(kw, k + 1))
        if (k == 0 || is_space(s[k - 1])) {
          at = std::min(at, k);
          break;
        }
    if (at == std::string_view::npos) return;  // not an event line (headers, "sys[0] finished", ...)
    s.remove_prefix(at);
    LogEvent e;
    e.line = line;
    e.callback = s[0] == 'c';
    s.remove_prefix(e.callback ? 9 : 6);
    auto field = [&](std::string_view key, bool last) {
      if (s.substr(0, key.size()) != key) fail(path, line, "expected '" + std::string(key) + "'");
      s.remove_prefix(key.size());
      if (last) return s;
      const size_t comma = s.find(',');
      if (comma == std::string_view::npos) fail(path, line, "the event ends after '" + std::string(key) + "'");
      std::string_view v = s.substr(0, comma);
      s.remove_prefix(comma + 1);
      return v;
    };
    auto number = [&](std::string_view key) {
      std::string_view v = field(key, false);
      int64_t x = 0;
      bool ok = !v.empty() && v.size() <= 18;
      for (char c : v) ok = ok && c >= '0' && c <= '9';
      if (!ok) fail(path, line, std::string(key) + " '" + std::string(v) + "' is not a non-negative integer");
      for (char c : v) x = x * 10 + (c - '0');
      return x;
    };
    e.npu = number("sys->id=");
    e.tick = number("tick=");
    e.node = number("node->id=");
    e.name = std::string(field("node->name=", true));
    out.push_back(std::move(e));
  });
  return out;
}

int timeline_tid(const std::string& n) {
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  const bool mem = has("MEM_LOAD_NODE") || has("MEM_STORE_NODE");
  if (mem && has("LOCAL_MEMORY")) return 1;
  if (mem && has("REMOTE_MEMORY")) return 2;
  if (has("COMP_NODE")) return 3;
  if (has("COMM_SEND_NODE") || has("COMM_RECV_NODE") || has("COMM_COLL_NODE")) return 4;
  return 0;
}

}  // namespace opf::chakra
