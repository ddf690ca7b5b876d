#include "matrix/test_results.h"

#include <libxml/parser.h>
#include <libxml/tree.h>

#include <regex>

#include <algorithm>
#include <filesystem>
#include <regex>
#include <set>

#include "common/files.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace {

std::string attr(xmlNode* n, const char* name) {
  xmlChar* v = xmlGetProp(n, reinterpret_cast<const xmlChar*>(name));
  if (!v) return "";
  std::string s(reinterpret_cast<const char*>(v));
  xmlFree(v);
  return s;
}

// GoogleTest messages start with a "file:line" line; the reason follows. One line, bounded.
std::string first_line(const std::string& s) {
  static const std::regex location(R"(^\S+:\d+$)");
  std::string out, line;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t end = s.find('\n', pos);
    if (end == std::string::npos) end = s.size();
    line = s.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || std::regex_match(line, location)) continue;
    out += (out.empty() ? "" : " | ") + line;
    if (out.size() > 300) break;
  }
  if (out.size() > 300) out = out.substr(0, 300) + "...";
  return out;
}

bool is(xmlNode* n, const char* name) {
  return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, reinterpret_cast<const xmlChar*>(name)) == 0;
}

void walk(xmlNode* n, std::vector<CaseResult>& out) {
  for (; n; n = n->next) {
    if (is(n, "testcase")) {
      CaseResult c;
      std::string cls = attr(n, "classname");
      c.key = (cls.empty() ? "" : cls + ".") + attr(n, "name");
      c.result = "pass";
      c.seconds = std::atof(attr(n, "time").c_str());
      if (attr(n, "result") == "skipped") c.result = "skip";
      for (xmlNode* ch = n->children; ch; ch = ch->next) {
        if (is(ch, "failure") || is(ch, "error")) {
          c.result = "fail";
          std::string msg = attr(ch, "message");
          if (msg.empty()) {
            xmlChar* t = xmlNodeGetContent(ch);
            if (t) msg = reinterpret_cast<const char*>(t), xmlFree(t);
          }
          c.message = first_line(msg);
        } else if (is(ch, "skipped") && c.result != "fail") {
          c.result = "skip";
          c.message = first_line(attr(ch, "message"));
          if (c.message.empty()) {
            xmlChar* t = xmlNodeGetContent(ch);
            if (t) c.message = first_line(reinterpret_cast<const char*>(t)), xmlFree(t);
          }
        }
      }
      out.push_back(std::move(c));
    } else {
      walk(n->children, out);
    }
  }
}

}  // namespace

std::vector<CaseResult> read_junit(const std::string& path) {
  xmlDoc* doc =
      xmlReadFile(path.c_str(), nullptr, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING | XML_PARSE_HUGE);
  if (!doc) {
    const xmlError* e = xmlGetLastError();
    throw Error(path + ":" + std::to_string(e ? e->line : 0) + ": invalid XML" +
                (e && e->message ? std::string(" (") + first_line(e->message) + ")" : ""));
  }
  std::vector<CaseResult> out;
  walk(xmlDocGetRootElement(doc), out);
  xmlFreeDoc(doc);
  return out;
}

std::vector<CaseResult> read_gtest_json(const std::string& path) {
  auto doc = json::parse_file(path);
  std::vector<CaseResult> out;
  for (const auto& suite : doc.get("testsuites").as_array())
    for (const auto& t : suite.get("testsuite").as_array()) {
      CaseResult c;
      c.key = suite.str("name") + "." + t.str("name");
      std::string result = t.str("result");
      c.result = result == "SKIPPED" ? "skip" : "pass";
      if (t.str("status") == "NOTRUN") c.result = "skip";
      const auto& fails = t.get("failures").as_array();
      if (!fails.empty()) {
        c.result = "fail";
        c.message = first_line(fails.front().str("failure"));
      }
      if (c.result == "skip") {
        const auto& s = t.get("skipped");
        c.message =
            first_line(s.is_array() && !s.as_array().empty() ? s.as_array().front().str("message") : s.str("message"));
        // GoogleTest 1.12's JSON drops the GTEST_SKIP() message; the test log has it
        if (c.message.empty()) c.message = "skipped (GoogleTest JSON has no skip message; see logs/test.log)";
      }
      std::string time = t.str("time");
      c.seconds = std::atof(time.c_str());
      out.push_back(std::move(c));
    }
  return out;
}

std::vector<CaseResult> read_meson_testlog(const std::string& path) {
  std::vector<CaseResult> out;
  for (const auto& e : json::parse_lines_file(path)) {
    CaseResult c;
    c.key = e.str("name");
    std::string r = e.str("result");
    c.result = (r == "OK" || r == "EXPECTEDFAIL") ? "pass" : r == "SKIP" ? "skip" : "fail";
    if (c.result == "fail")
      c.message = "meson test result " + r + ", exit " + std::to_string(e.get("returncode").as_int());
    c.seconds = e.num("duration");
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<CaseResult> collect_cell_tests(const std::string& cell_dir) {
  namespace fs = std::filesystem;
  std::vector<CaseResult> out;
  std::set<std::string> keys;
  auto add = [&](std::vector<CaseResult> v) {
    for (auto& c : v)
      if (keys.insert(c.key).second) out.push_back(std::move(c));
  };
  std::string junit = cell_dir + "/meson/testlog.junit.xml";
  if (files::exists(junit)) add(read_junit(junit));
  std::error_code ec;
  if (fs::is_directory(cell_dir + "/gtest", ec)) {
    std::vector<std::string> paths;
    for (const auto& e : fs::directory_iterator(cell_dir + "/gtest", ec))
      if (e.path().extension() == ".json") paths.push_back(e.path().string());
    std::sort(paths.begin(), paths.end());
    for (const auto& p : paths) add(read_gtest_json(p));
  }
  std::string testlog = cell_dir + "/meson/testlog.json";
  if (files::exists(testlog)) {
    // whole-test results (a crashed or timed-out executable stays visible beside its cases)
    for (auto& c : read_meson_testlog(testlog)) {
      c.key = "meson:" + c.key;
      if (keys.insert(c.key).second) out.push_back(std::move(c));
    }
  }
  return out;
}

bool is_gpu_debt(const CaseResult& c) {
  if (c.result != "skip") return false;
  static const std::regex gpu(R"((cuda|hip|gpu|device|driver|rocm|nvrtc|hiprtc))", std::regex::icase);
  return std::regex_search(c.key, gpu) || std::regex_search(c.message, gpu);
}

std::vector<CaseResult> bench_gpu_debt(const std::string& bench_json_path) {
  std::vector<CaseResult> out;
  json::Value doc;
  try {
    doc = json::parse_file(bench_json_path);
  } catch (const Error&) {
    return out;  // the bench step reports its own failure
  }
  const std::string lines = doc.get("context").str("opforge_not_run", "");
  for (size_t a = 0, b; a < lines.size(); a = b + 1) {
    b = lines.find('\n', a);
    if (b == std::string::npos) b = lines.size();
    const std::string line = lines.substr(a, b - a);
    const size_t head = line.find("): ");
    CaseResult c{"bench: " + line.substr(0, head == std::string::npos ? line.size() : head + 1), "skip",
                 head == std::string::npos ? line : line.substr(head + 3), 0};
    if (!line.empty() && is_gpu_debt(c)) out.push_back(std::move(c));
  }
  return out;
}

json::Value cases_json(const std::vector<CaseResult>& cases) {
  json::Value a = json::Array{};
  for (const auto& c : cases) {
    json::Value j;
    j.set("key", c.key);
    j.set("result", c.result);
    if (!c.message.empty()) j.set("message", c.message);
    j.set("seconds", c.seconds);
    a.push(j);
  }
  return a;
}

std::vector<CaseResult> cases_from_json(const json::Value& v) {
  std::vector<CaseResult> out;
  for (const auto& j : v.as_array()) out.push_back({j.str("key"), j.str("result"), j.str("message"), j.num("seconds")});
  return out;
}

}  // namespace opf::matrix
