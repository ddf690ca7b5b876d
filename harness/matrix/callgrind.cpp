#include "matrix/callgrind.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <sstream>

#include "common/files.h"
#include "opforge/error.h"

namespace opf::matrix {

namespace {

const std::string kClientRequest = "Client Request: ";

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> w;
  for (std::string t; in >> t;) w.push_back(t);
  return w;
}

}  // namespace

CallgrindDump parse_callgrind_out(const std::string& text, const std::string& origin) {
  CallgrindDump d;
  int ir_index = -1, line_no = 0, events_line = 0;
  std::string count_line;  // `summary:` wins over `totals:` (both hold the same sums)
  int count_line_no = 0;
  bool summary = false;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    ++line_no;
    auto value = [&](const char* key) -> const char* {
      size_t n = std::char_traits<char>::length(key);
      return l.compare(0, n, key) == 0 ? l.c_str() + n : nullptr;
    };
    if (const char* v = value("desc: Trigger: ")) {
      d.trigger = v;
    } else if (const char* v = value("events:")) {
      auto ev = words(v);
      auto it = std::find(ev.begin(), ev.end(), "Ir");
      if (it == ev.end()) throw Error(origin + ":" + std::to_string(line_no) + ": events line without Ir");
      ir_index = int(it - ev.begin());
      events_line = line_no;
    } else if (const char* v = value("summary:")) {
      count_line = v, count_line_no = line_no, summary = true;
    } else if (const char* v = value("totals:"); v && !summary) {
      count_line = v, count_line_no = line_no;
    }
  }
  if (ir_index < 0)
    throw Error(origin + ":" + std::to_string(line_no) + ": no `events:` line (not a callgrind profile)");
  if (count_line_no == 0)
    throw Error(origin + ":" + std::to_string(line_no) + ": no `summary:` or `totals:` line (truncated profile?)");
  auto counts = words(count_line);
  // callgrind omits trailing zero counts
  if (size_t(ir_index) >= counts.size()) return d;
  const std::string& c = counts[size_t(ir_index)];
  if (c.empty() || c.find_first_not_of("0123456789") != std::string::npos)
    throw Error(origin + ":" + std::to_string(count_line_no) + ": Ir count '" + c +
                "' is not a number (events on line " + std::to_string(events_line) + ")");
  d.instructions = std::stod(c);
  return d;
}

json::Value callgrind_json(const std::vector<CallgrindDump>& dumps, int calls) {
  if (calls <= 0) throw Error("callgrind: calls must be positive");
  std::map<std::string, double> by_name;
  for (const auto& d : dumps) {
    if (d.trigger.rfind(kClientRequest, 0) != 0) continue;
    std::string name = d.trigger.substr(kClientRequest.size());
    if (!by_name.emplace(name, d.instructions).second) throw Error("callgrind: case '" + name + "' dumped twice");
  }
  json::Value doc;
  doc.set("schema", "opforge.callgrind/1");
  doc.set("tool", "valgrind --tool=callgrind --collect-atstart=no (opforge-kernel-instr)");
  doc.set("calls_per_case", calls);
  json::Value list = json::Array{};
  for (const auto& [name, ir] : by_name) {
    json::Value b;
    b.set("name", name);
    b.set("instructions", std::round(ir / calls));  // per kernel call
    list.push(b);
  }
  doc.set("benchmarks", list);
  return doc;
}

std::vector<CallgrindDump> read_callgrind_dir(const std::string& dir) {
  std::vector<std::string> paths;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.is_regular_file() && e.path().filename().string().rfind("callgrind.out", 0) == 0)
      paths.push_back(e.path().string());
  std::sort(paths.begin(), paths.end());
  std::vector<CallgrindDump> dumps;
  for (const auto& p : paths) dumps.push_back(parse_callgrind_out(files::read(p), p));
  return dumps;
}

std::string valgrind_cannot_run_reason(const std::string& log) {
  const size_t at = log.find("Illegal opcode at address");
  if (at == std::string::npos) return "";
  std::string where;
  const size_t fn = log.find(": ", log.find("at 0x", at));
  if (fn != std::string::npos) where = " in " + log.substr(fn + 2, log.find('\n', fn) - fn - 2);
  return "valgrind cannot run this machine's code (illegal opcode under valgrind" + where +
         "): no instruction counts here";
}

}  // namespace opf::matrix
