#include "matrix/callgrind.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
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

bool is_system_library(const std::string& object) {
  for (const char* dir : {"/lib/", "/lib32/", "/lib64/", "/usr/lib/", "/usr/lib32/", "/usr/lib64/"})
    if (object.rfind(dir, 0) == 0) return true;
  return false;
}

CallgrindDump parse_callgrind_out(const std::string& text, const std::string& origin) {
  CallgrindDump d;
  int ir_index = -1, positions = 1, line_no = 0, events_line = 0;
  std::string count_line;  // `summary:` wins over `totals:` (both hold the same sums)
  int count_line_no = 0;
  bool summary = false;
  // The body: `ob=` names the object of the cost lines that follow (compressed as "(id) name",
  // later "(id)"); a `calls=` line is followed by one line of the call's inclusive cost, which
  // is not self cost. Self costs summed by object give the system libraries' share.
  std::map<std::string, std::string> object_names;  // "(id)" -> name
  bool system = false, after_calls = false;
  double self_total = 0, self_system = 0;
  auto fail = [&](const std::string& what) { throw Error(origin + ":" + std::to_string(line_no) + ": " + what); };
  auto count_at = [&](const std::vector<std::string>& w, size_t i) -> double {
    if (i >= w.size()) return 0;  // callgrind omits trailing zero counts
    const std::string& c = w[i];
    if (c.empty() || c.find_first_not_of("0123456789") != std::string::npos)
      fail("Ir count '" + c + "' is not a number" +
           (events_line ? " (events on line " + std::to_string(events_line) + ")" : std::string()));
    return std::stod(c);
  };
  // "(id) name" defines the id, "(id)" refers to it; `ob=` and `cob=` share the ids
  auto object_name = [&](const std::string& v) -> std::string {
    if (v.empty() || v[0] != '(') return v;
    const size_t close = v.find(')');
    if (close == std::string::npos) fail("an object with an unclosed (id)");
    const std::string id = v.substr(0, close + 1);
    if (v.size() > close + 2) return object_names[id] = v.substr(close + 2);  // ")" then one space
    auto it = object_names.find(id);
    if (it == object_names.end()) fail("object " + id + " used before it was named");
    return it->second;
  };
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    ++line_no;
    auto value = [&](const char* key) -> const char* {
      size_t n = std::char_traits<char>::length(key);
      return l.compare(0, n, key) == 0 ? l.c_str() + n : nullptr;
    };
    if (!l.empty() && (std::isdigit(static_cast<unsigned char>(l[0])) || l[0] == '+' || l[0] == '-' || l[0] == '*')) {
      if (ir_index < 0) fail("a cost line before the `events:` line");
      const double ir = count_at(words(l), size_t(positions) + size_t(ir_index));
      if (after_calls) {  // the call's inclusive cost
        after_calls = false;
        continue;
      }
      self_total += ir;
      if (system) self_system += ir;
    } else if (const char* v = value("ob=")) {
      system = is_system_library(object_name(v));
    } else if (const char* v = value("cob=")) {
      object_name(v);  // (names an id for later `ob=` lines too)
    } else if (value("calls=")) {
      after_calls = true;
    } else if (const char* v = value("desc: Trigger: ")) {
      d.trigger = v;
    } else if (const char* v = value("positions:")) {
      positions = int(words(v).size());
      if (positions < 1) fail("an empty `positions:` line");
    } else if (const char* v = value("events:")) {
      auto ev = words(v);
      auto it = std::find(ev.begin(), ev.end(), "Ir");
      if (it == ev.end()) fail("events line without Ir");
      ir_index = int(it - ev.begin());
      events_line = line_no;
    } else if (const char* v = value("summary:")) {
      count_line = v, count_line_no = line_no, summary = true;
    } else if (const char* v = value("totals:"); v && !summary) {
      count_line = v, count_line_no = line_no;
    }
  }
  if (ir_index < 0) fail("no `events:` line (not a callgrind profile)");
  if (count_line_no == 0) fail("no `summary:` or `totals:` line (truncated profile?)");
  line_no = count_line_no;
  d.instructions = count_at(words(count_line), size_t(ir_index));
  // The self costs must add up to the summary, or the split by object cannot be trusted.
  if (self_total != d.instructions)
    fail("the self costs add up to " + std::to_string(int64_t(self_total)) + " instructions, not the summary's " +
         std::to_string(int64_t(d.instructions)) + " (a profile format this parser does not read)");
  d.library_instructions = self_system;
  return d;
}

json::Value callgrind_json(const std::vector<CallgrindDump>& dumps, int calls) {
  if (calls <= 0) throw Error("callgrind: calls must be positive");
  std::map<std::string, std::pair<double, double>> by_name;  // (all, in system libraries)
  for (const auto& d : dumps) {
    if (d.trigger.rfind(kClientRequest, 0) != 0) continue;
    std::string name = d.trigger.substr(kClientRequest.size());
    if (!by_name.emplace(name, std::pair{d.instructions, d.library_instructions}).second)
      throw Error("callgrind: case '" + name + "' dumped twice");
  }
  json::Value doc;
  doc.set("schema", "opforge.callgrind/2");
  doc.set("tool", "valgrind --tool=callgrind --collect-atstart=no (opforge-kernel-instr)");
  doc.set("calls_per_case", calls);
  json::Value list = json::Array{};
  for (const auto& [name, ir] : by_name) {
    json::Value b;
    b.set("name", name);
    b.set("instructions", std::round((ir.first - ir.second) / calls));  // per kernel call
    b.set("library_instructions", std::round(ir.second / calls));
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
