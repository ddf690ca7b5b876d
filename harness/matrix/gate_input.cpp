#include "matrix/gate_input.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "common/files.h"
#include "common/number_text.h"
#include "common/utc_time.h"
#include "matrix/run_layout.h"
#include "matrix/test_results.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace fs = std::filesystem;

namespace {
double to_ns(double v, const std::string& unit, const std::string& origin) {
  if (unit == "ns" || unit.empty()) return v;
  if (unit == "us") return v * 1e3;
  if (unit == "ms") return v * 1e6;
  if (unit == "s") return v * 1e9;
  throw Error(origin + ": unknown time_unit '" + unit + "'");
}

// A baseline file is edited by hand (pruned, merged), so every field is checked and a wrong one is
// named by its place ("benchmarks[3].ns[1]"): the lenient accessors would read it as 0 or empty,
// and a gate over silently dropped numbers passes what it never compared.
class BaselineReader {
 public:
  explicit BaselineReader(const std::string& path) : path_(path) {}
  const json::Array& list(const json::Value& doc, const char* key) const {
    const auto& v = doc.get(key);
    if (!v.is_array()) fail(key, "missing or not an array");
    return v.as_array();
  }
  std::string text(const json::Value& rec, const std::string& where, const char* key, bool required) const {
    const auto& v = rec.get(key);
    if (v.is_string() && !(required && v.as_string().empty())) return v.as_string();
    if (!required && v.is_null()) return {};
    fail(where + "." + key, required ? "missing or not a non-empty string" : "not a string");
  }
  double number(const json::Value& v, const std::string& where) const {
    if (!v.is_number()) fail(where, "not a number");
    return v.as_double();
  }
  [[noreturn]] void fail(const std::string& where, const std::string& problem) const {
    throw Error(path_ + ": " + where + ": " + problem);
  }

 private:
  std::string path_;
};

GateInput read_baseline_file(const std::string& path) {
  GateInput in;
  in.origin = path;
  auto doc = json::parse_file(path);
  if (doc.str("schema") != "opforge.baseline/1")
    throw Error(path + ": not a run directory or an opforge.baseline/1 file");
  BaselineReader r(path);
  in.meta = doc.get("meta");
  const auto& benchmarks = r.list(doc, "benchmarks");
  for (size_t i = 0; i < benchmarks.size(); ++i) {
    const auto& b = benchmarks[i];
    std::string at = "benchmarks[" + std::to_string(i) + "]";
    BenchSamples s{r.text(b, at, "cell", false), r.text(b, at, "name", true), {}, 0};
    if (b.has("bytes_per_second")) s.bytes_per_second = r.number(b.get("bytes_per_second"), at + ".bytes_per_second");
    const auto& ns = b.get("ns");
    if (!ns.is_array() || ns.as_array().empty()) r.fail(at + ".ns", "missing or not a non-empty array of times");
    for (size_t k = 0; k < ns.as_array().size(); ++k) {
      double t = r.number(ns.as_array()[k], at + ".ns[" + std::to_string(k) + "]");
      if (!(t > 0) || !std::isfinite(t)) r.fail(at + ".ns[" + std::to_string(k) + "]", "not a positive time");
      s.ns.push_back(t);
    }
    in.bench.push_back(std::move(s));
  }
  const auto& tests = r.list(doc, "tests");
  for (size_t i = 0; i < tests.size(); ++i) {
    std::string at = "tests[" + std::to_string(i) + "]";
    in.tests.push_back(
        {r.text(tests[i], at, "cell", false), r.text(tests[i], at, "key", true), r.text(tests[i], at, "result", true)});
  }
  const auto& chakra = r.list(doc, "chakra");
  for (size_t i = 0; i < chakra.size(); ++i) {
    const auto& c = chakra[i];
    std::string at = "chakra[" + std::to_string(i) + "]";
    in.chakra.push_back({r.text(c, at, "cell", false), r.text(c, at, "trace", true), r.text(c, at, "status", true),
                         r.text(c, at, "golden", false), c.num("seconds")});
  }
  const auto& instr = r.list(doc, "callgrind");
  for (size_t i = 0; i < instr.size(); ++i) {
    std::string at = "callgrind[" + std::to_string(i) + "]";
    const double n = r.number(instr[i].get("instructions"), at + ".instructions");
    // the gate divides by it: 0 would make every count a regression (or NaN, none)
    if (!(n > 0) || !std::isfinite(n)) r.fail(at + ".instructions", "not a positive count");
    double lib = -1;
    if (instr[i].has("library_instructions")) {
      lib = r.number(instr[i].get("library_instructions"), at + ".library_instructions");
      if (!(lib >= 0) || !std::isfinite(lib)) r.fail(at + ".library_instructions", "not a count");
    }
    in.instr.push_back({r.text(instr[i], at, "cell", false), r.text(instr[i], at, "name", true), n, lib});
  }
  return in;
}
}  // namespace

std::vector<BenchSamples> read_benchmark_json(const std::string& path, const std::string& cell) {
  auto doc = json::parse_file(path);
  if (!doc.get("benchmarks").is_array()) throw Error(path + ": not google-benchmark JSON (no \"benchmarks\" array)");
  std::map<std::string, BenchSamples> by_name;
  std::vector<std::string> order;
  std::map<std::string, std::pair<double, int>> bps;
  for (const auto& b : doc.get("benchmarks").as_array()) {
    std::string type = b.str("run_type", "iteration");
    if (type != "iteration" || b.get("error_occurred").as_bool()) continue;
    std::string name = b.str("run_name", b.str("name"));
    if (!by_name.count(name)) {
      by_name[name] = BenchSamples{cell, name, {}, 0};
      order.push_back(name);
    }
    by_name[name].ns.push_back(to_ns(b.num("real_time"), b.str("time_unit"), path));
    if (b.has("bytes_per_second")) {
      bps[name].first += b.num("bytes_per_second");
      bps[name].second += 1;
    }
  }
  std::vector<BenchSamples> out;
  for (const auto& n : order) {
    auto s = by_name[n];
    if (bps[n].second) s.bytes_per_second = bps[n].first / bps[n].second;
    out.push_back(std::move(s));
  }
  return out;
}

std::vector<ChakraOutcome> read_chakra_json(const std::string& path, const std::string& cell) {
  auto doc = json::parse_file(path);
  // accept {"traces": [...]} or {"results": [...]} or a bare array of per-trace records
  const json::Value* list = &doc;
  if (doc.is_object()) list = doc.get("traces").is_array() ? &doc.get("traces") : &doc.get("results");
  if (!list->is_array()) throw Error(path + ": no per-trace list (\"traces\") in the Chakra regression JSON");
  std::vector<ChakraOutcome> out;
  for (const auto& t : list->as_array()) {
    ChakraOutcome c;
    c.cell = cell;
    c.trace = t.str("trace", t.str("name"));
    if (t.get("status").is_string()) c.status = t.str("status");
    else if (t.get("ok").is_bool()) c.status = t.get("ok").as_bool() ? "pass" : "fail";
    else if (t.get("pass").is_bool()) c.status = t.get("pass").as_bool() ? "pass" : "fail";
    std::transform(c.status.begin(), c.status.end(), c.status.begin(), ::tolower);
    if (c.status == "ok" || c.status == "passed" || c.status == "same") c.status = "pass";
    c.golden = t.str("golden_sha256", t.str("digest", t.str("sha256")));
    c.seconds = t.num("convert_seconds", t.num("seconds"));
    if (c.trace.empty()) throw Error(path + ": a Chakra regression record without \"trace\"/\"name\"");
    out.push_back(std::move(c));
  }
  return out;
}

std::vector<InstrCount> read_callgrind_json(const std::string& path, const std::string& cell) {
  auto doc = json::parse_file(path);
  if (doc.str("schema") != "opforge.callgrind/2") throw Error(path + ": not opforge.callgrind/2");
  std::vector<InstrCount> out;
  for (const auto& b : doc.get("benchmarks").as_array()) {
    if (!b.get("instructions").is_number())
      throw Error(path + ": benchmark '" + b.str("name") + "' without \"instructions\"");
    const double n = b.num("instructions");
    if (!(n > 0) || !std::isfinite(n))
      throw Error(path + ": benchmark '" + b.str("name") + "': instructions " + opf::shortest_double(n) +
                  " is not a positive count");
    double lib = -1;
    if (b.get("library_instructions").is_number()) {
      lib = b.num("library_instructions");
      if (!(lib >= 0) || !std::isfinite(lib))
        throw Error(path + ": benchmark '" + b.str("name") + "': library_instructions " + opf::shortest_double(lib) +
                    " is not a count");
    }
    out.push_back({cell, b.str("name"), n, lib});
  }
  return out;
}

GateInput read_gate_input(const std::string& path) {
  GateInput in;
  in.origin = path;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    if (!files::exists(path + "/run.json")) throw Error(path + ": not a recorded run (no run.json)");
    auto run = json::parse_file(path + "/run.json");
    in.meta.set("run", run.str("run"));
    in.meta.set("git", run.get("git"));
    in.meta.set("machine", run.get("machine"));
    for (const auto& cell : finished_cells(path)) {
      std::string dir = cell.str("dir"), name = cell.str("name");
      for (const auto& b : cell.get("bench").as_array()) {
        auto v = read_benchmark_json(dir + "/" + b.as_string(), name);
        in.bench.insert(in.bench.end(), v.begin(), v.end());
      }
      std::string tests;
      if (files::read_if_exists(dir + "/tests.json", tests))
        for (const auto& c : cases_from_json(json::parse(tests, dir + "/tests.json")))
          in.tests.push_back({name, c.key, c.result});
      if (cell.get("chakra").is_string()) {
        auto v = read_chakra_json(dir + "/" + cell.str("chakra"), name);
        in.chakra.insert(in.chakra.end(), v.begin(), v.end());
      }
      if (files::exists(dir + "/callgrind.json")) {
        auto v = read_callgrind_json(dir + "/callgrind.json", name);
        in.instr.insert(in.instr.end(), v.begin(), v.end());
      }
    }
    return in;
  }
  return read_baseline_file(path);
}
json::Value baseline_json(const GateInput& in) {
  json::Value v;
  v.set("schema", "opforge.baseline/1");
  v.set("created_utc", utc_timestamp());
  v.set("source", in.origin);
  v.set("meta", in.meta);
  json::Value b = json::Array{};
  for (const auto& s : in.bench) {
    json::Value j;
    j.set("cell", s.cell);
    j.set("name", s.name);
    json::Value ns = json::Array{};
    for (double x : s.ns) ns.push(x);
    j.set("ns", ns);
    if (s.bytes_per_second > 0) j.set("bytes_per_second", s.bytes_per_second);
    b.push(j);
  }
  v.set("benchmarks", b);
  json::Value t = json::Array{};
  for (const auto& x : in.tests) {
    json::Value j;
    j.set("cell", x.cell);
    j.set("key", x.key);
    j.set("result", x.result);
    t.push(j);
  }
  v.set("tests", t);
  json::Value c = json::Array{};
  for (const auto& x : in.chakra) {
    json::Value j;
    j.set("cell", x.cell);
    j.set("trace", x.trace);
    j.set("status", x.status);
    if (!x.golden.empty()) j.set("golden", x.golden);
    if (x.seconds > 0) j.set("seconds", x.seconds);
    c.push(j);
  }
  v.set("chakra", c);
  json::Value i = json::Array{};
  for (const auto& x : in.instr) {
    json::Value j;
    j.set("cell", x.cell);
    j.set("name", x.name);
    j.set("instructions", x.instructions);
    if (x.library_instructions >= 0) j.set("library_instructions", x.library_instructions);
    i.push(j);
  }
  v.set("callgrind", i);
  return v;
}

}  // namespace opf::matrix
