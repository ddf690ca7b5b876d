#include "matrix/runner.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <regex>
#include <thread>

#include "common/files.h"
#include "common/sha256.h"
#include "common/utc_time.h"
#include "matrix/build_dir.h"
#include "matrix/callgrind.h"
#include "matrix/inventory.h"
#include "matrix/machine.h"
#include "matrix/process.h"
#include "matrix/progress.h"
#include "matrix/run_layout.h"
#include "matrix/test_results.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace fs = std::filesystem;

namespace {

std::atomic<bool> g_stop{false};
std::atomic<int> g_signals{0};

void on_signal(int) {
  if (g_signals.fetch_add(1) >= 1) _exit(130);  // second Ctrl-C: leave now
  g_stop = true;
}

struct StepRecord {
  std::string name, status, detail, log;
  double seconds = 0;
};

struct CellRun {
  CellRun(const PlanSource& p, const OpManifest& m, const Cell& c, const RunOptions& o, Progress& pr)
      : ps(p), manifest(m), cell(c), opt(o), progress(pr) {}
  const PlanSource& ps;
  const OpManifest& manifest;
  const Cell& cell;
  const RunOptions& opt;
  Progress& progress;
  int index = 0, slot = 0;
  bool bench = false;
  bool callgrind = false;
  int build_jobs = 1;
  std::string dir, build, logs;
  std::vector<StepRecord> steps;
  bool blocked = false;  // setup or compile failed: later steps cannot run
  json::Value record;    // extra fields for cell.json

  double timeout(const std::string& step) const {
    if (opt.step_timeout > 0) return opt.step_timeout;
    auto it = ps.plan.run.timeouts.find(step);
    return it == ps.plan.run.timeouts.end() ? 1800 : it->second;
  }

  StepRecord& begin(const std::string& name) {
    progress.step(slot, index, cell.name, name);
    steps.push_back({name, "", "", "logs/" + name + ".log", 0});
    return steps.back();
  }

  // Runs one process as (part of) a step; returns true on success.
  bool exec(StepRecord& s, std::vector<std::string> argv, std::vector<std::pair<std::string, std::string>> env,
            const std::string& cwd, double timeout_s) {
    proc::Spec spec{std::move(argv), cwd.empty() ? ps.source_dir : cwd, std::move(env), dir + "/" + s.log, timeout_s};
    {
      std::string cmd;
      for (const auto& a : spec.argv) cmd += (cmd.empty() ? "$ " : " ") + a;
      std::string prev;
      files::read_if_exists(spec.log_path, prev);
      files::write_atomic(spec.log_path, prev + cmd + "\n");
    }
    auto r = proc::run(spec, &g_stop);
    s.seconds += r.seconds;
    if (r.ok()) {
      if (s.status.empty()) s.status = "pass";
      return true;
    }
    s.status = r.interrupted ? "interrupted" : r.timed_out ? "timeout" : r.signal ? "crash" : "fail";
    s.detail = r.describe();
    return false;
  }

  void skip(const std::string& name, const std::string& why) {
    steps.push_back({name, blocked ? "blocked" : "skip", why, "", 0});
  }

  bool stopped() const { return g_stop.load(); }
};

std::vector<std::pair<std::string, std::string>> env_of(const json::Value& obj) {
  std::vector<std::pair<std::string, std::string>> env;
  for (const auto& [k, v] : obj.as_object()) env.emplace_back(k, v.as_string());
  return env;
}

void step_setup(CellRun& c) {
  auto& s = c.begin("setup");
  std::error_code ec;
  fs::remove_all(c.build, ec);  // a resumed cell starts clean
  files::write_atomic(c.dir + "/native.ini", native_file(c.cell, c.ps.catalog));
  if (!c.exec(s, {"meson", "setup", "--native-file", c.dir + "/native.ini", c.build, c.ps.source_dir}, {},
              c.ps.source_dir, c.timeout("setup")))
    c.blocked = true;
}

void step_compile(CellRun& c) {
  if (c.blocked) return c.skip("compile", "setup failed");
  auto& s = c.begin("compile");
  if (!c.exec(s, {"meson", "compile", "-C", c.build, "-j", std::to_string(c.build_jobs)}, {}, "", c.timeout("compile")))
    c.blocked = true;
}

void step_test(CellRun& c) {
  if (c.blocked) return c.skip("test", "build failed");
  json::Value tests;
  std::string text;
  if (proc::capture({"meson", "introspect", c.build, "--tests"}, text, "", 120))
    tests = json::parse(text, "meson introspect --tests");
  if (tests.as_array().empty()) {
    auto opt = c.cell.options.find("tests");
    return c.skip("test", opt != c.cell.options.end() && opt->second == "'disabled'"
                              ? "tests disabled in this cell (tests = \"disabled\")"
                              : "no tests in this build");
  }
  auto& s = c.begin("test");
  files::make_dirs(c.dir + "/gtest");
  int procs = std::max(1, c.build_jobs);
  c.exec(s, {"meson", "test", "-C", c.build, "--print-errorlogs", "--num-processes", std::to_string(procs)},
         {{"GTEST_OUTPUT", "json:" + c.dir + "/gtest/"}}, "", c.timeout("test"));
  for (const char* f : {"testlog.json", "testlog.junit.xml", "testlog.txt"}) {
    std::string from = c.build + "/meson-logs/" + f;
    if (files::exists(from)) files::copy_atomic(from, c.dir + "/meson/" + f);
  }
  std::vector<CaseResult> cases;
  try {
    cases = collect_cell_tests(c.dir);
  } catch (const Error& e) {
    s.status = "fail";
    s.detail = e.what();
  }
  int pass = 0, fail = 0, skipped = 0;
  json::Value debt = json::Array{};
  for (const auto& k : cases) {
    (k.result == "pass" ? pass : k.result == "fail" ? fail : skipped)++;
    if (is_gpu_debt(k)) {
      json::Value d;
      d.set("test", k.key);
      d.set("reason", k.message);
      debt.push(d);
    }
  }
  files::write_atomic(c.dir + "/tests.json", json::dump(cases_json(cases)));
  json::Value sum;
  sum.set("passed", pass);
  sum.set("failed", fail);
  sum.set("skipped", skipped);
  c.record.set("tests", sum);
  c.record.set("gpu_debt", debt);
  if (s.status == "pass" && fail > 0) {
    s.status = "fail";
    s.detail = std::to_string(fail) + " failed";
  }
  if (s.detail.empty())
    s.detail =
        std::to_string(pass) + " passed, " + std::to_string(fail) + " failed, " + std::to_string(skipped) + " skipped";
}

void step_inventory(CellRun& c) {
  if (c.blocked) return c.skip("inventory", "build failed");
  auto& s = c.begin("inventory");
  auto t0 = std::chrono::steady_clock::now();
  Inventory inv;
  try {
    inv = check_inventory({c.ps.source_dir, c.build, c.dir, c.dir + "/" + s.log, c.timeout("inventory")}, c.manifest);
  } catch (const Error& e) {
    inv.checks.push_back({"inventory", "", "", "fail", e.what()});
  }
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  files::write_atomic(c.dir + "/inventory.json", json::dump(inv.to_json()));
  int fails = 0, owed = 0;
  std::string first;
  for (const auto& k : inv.checks) {
    if (k.status == "fail" && fails++ == 0) first = k.what + " " + k.op + "/" + k.backend + ": " + k.detail;
    if (k.status == "owed") {
      ++owed;
      json::Value d;
      d.set("test", "inventory:" + k.what + ":" + k.op + "/" + k.backend);
      d.set("reason", k.detail);
      json::Value debt = c.record.get("gpu_debt");
      debt.push(d);
      c.record.set("gpu_debt", debt);
    }
  }
  s.status = fails ? "fail" : "pass";
  s.detail = fails ? std::to_string(fails) + " mismatches, first: " + first
                   : std::to_string(inv.checks.size() - size_t(owed)) + " checks passed" +
                         (owed ? ", " + std::to_string(owed) + " owed" : "");
  if (inv.probe.is_object()) c.record.set("probe", "probe.json");
}

void step_bench(CellRun& c) {
  if (!c.bench) return c.skip("bench", "benchmarks not asked for");
  if (c.blocked) return c.skip("bench", "build failed");
  json::Value list;
  std::string text;
  if (proc::capture({"meson", "introspect", c.build, "--benchmarks"}, text, "", 120))
    list = json::parse(text, "meson introspect --benchmarks");
  if (list.as_array().empty()) return c.skip("bench", "no benchmarks in this build");
  auto& s = c.begin("bench");
  auto t0 = std::chrono::steady_clock::now();
  json::Value outputs = json::Array{};
  for (const auto& b : list.as_array()) {
    double left = c.timeout("bench") - std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (left <= 1) {
      s.status = "timeout";
      s.detail = "bench step out of time before " + b.str("name");
      break;
    }
    std::string name = b.str("name");
    for (auto& ch : name)
      if (!isalnum(static_cast<unsigned char>(ch)) && ch != '-' && ch != '_' && ch != '.') ch = '_';
    std::string out = c.dir + "/bench/" + name + ".json";
    files::make_dirs(c.dir + "/bench");
    std::vector<std::string> argv;
    for (const auto& a : b.get("cmd").as_array()) argv.push_back(a.as_string());
    argv.push_back("--benchmark_out=" + out + ".partial");
    argv.push_back("--benchmark_out_format=json");
    for (const auto& a : c.ps.plan.run.bench_args) argv.push_back(a);
    std::string cwd = b.str("workdir");
    if (c.exec(s, argv, env_of(b.get("env")), cwd.empty() ? c.build : cwd, left)) {
      std::error_code ec;
      fs::rename(out + ".partial", out, ec);  // the JSON is the benchmark's own, unchanged
      outputs.push("bench/" + name + ".json");
      json::Value debt = c.record.get("gpu_debt");  // GPU benchmarks owed, beside the GPU tests
      if (!debt.is_array()) debt = json::Array{};
      for (const CaseResult& k : bench_gpu_debt(out)) {
        json::Value d;
        d.set("test", k.key);
        d.set("reason", k.message);
        debt.push(d);
      }
      c.record.set("gpu_debt", debt);
    } else {
      break;
    }
    if (c.stopped()) break;
  }
  c.record.set("bench", outputs);
  if (s.status == "pass") s.detail = std::to_string(outputs.as_array().size()) + " benchmark file(s)";
}

// Instruction counts: opforge-kernel-instr (built with the benchmarks) under callgrind, one
// profile dump per cpu kernel case, counted around the kernel calls only; see kernel_instr.cpp.
void step_callgrind(CellRun& c) {
  if (!c.callgrind) return c.skip("callgrind", "instruction counts not asked for");
  if (c.blocked) return c.skip("callgrind", "build failed");
  const std::string driver = c.build + "/harness/suites/opforge-kernel-instr";
  if (!files::exists(driver)) return c.skip("callgrind", "no opforge-kernel-instr in this build (bench disabled)");
  std::string version;
  if (!proc::capture({"valgrind", "--version"}, version, "", 30)) return c.skip("callgrind", "valgrind not found");
  auto& s = c.begin("callgrind");
  const std::string tmp = c.dir + "/callgrind.tmp";
  std::error_code ec;
  fs::remove_all(tmp, ec);  // a resumed cell's half-written profiles
  files::make_dirs(tmp);
  bool ok =
      c.exec(s,
             {"valgrind", "--tool=callgrind", "--collect-atstart=no", "--callgrind-out-file=" + tmp + "/callgrind.out",
              driver, "--calls=" + std::to_string(kCallgrindCalls)},
             {{"OPFORGE_CACHE_DIR", c.build + "/jit-cache"}}, c.build, c.timeout("callgrind"));
  if (!ok && s.status == "crash") {  // not a kernel failure where valgrind cannot run here: a skip
    std::string log;
    files::read_if_exists(c.dir + "/" + s.log, log);
    if (std::string why = valgrind_cannot_run_reason(log); !why.empty()) {
      s.status = "skip";
      s.detail = why;
    }
  }
  if (ok) {
    try {
      json::Value doc = callgrind_json(read_callgrind_dir(tmp), kCallgrindCalls);
      while (!version.empty() && isspace(static_cast<unsigned char>(version.back()))) version.pop_back();
      doc.set("valgrind", version);
      const size_t n = doc.get("benchmarks").as_array().size();
      if (n == 0) throw Error("opforge-kernel-instr dumped no kernel profiles");
      files::write_atomic(c.dir + "/callgrind.json", json::dump(doc));
      c.record.set("callgrind", "callgrind.json");
      s.detail = std::to_string(n) + " kernel case(s), " + std::to_string(kCallgrindCalls) + " calls each";
    } catch (const Error& e) {
      s.status = "fail";
      s.detail = e.what();
    }
  }
  fs::remove_all(tmp, ec);
}

// `opforge chakra regress` without a JSON option: the per-trace lines (`ok   <case>`,
// `FAIL <case>` + indented differences, `SKIP <case>`) of its output, recorded as
// opforge.chakra-regress/1 (nothing is written when there is no such line).
void write_regress_json_from_log(const std::string& log_path, double seconds, const std::string& out) {
  std::string text;
  files::read_if_exists(log_path, text);
  static const std::regex line_re(R"(^(ok|FAIL|SKIP)\s+(\S+)\s*$)");
  json::Value traces = json::Array{};
  size_t pos = 0;
  while (pos < text.size()) {
    size_t e = text.find('\n', pos);
    if (e == std::string::npos) e = text.size();
    std::string l = text.substr(pos, e - pos);
    pos = e + 1;
    std::smatch m;
    if (std::regex_match(l, m, line_re)) {
      json::Value t;
      t.set("trace", m[2].str());
      t.set("status", m[1] == "ok" ? "pass" : m[1] == "FAIL" ? "fail" : "skip");
      t.set("messages", json::Array{});
      traces.push(t);
    } else if (l.rfind("     ", 0) == 0 && !traces.as_array().empty()) {
      json::Value msgs = traces.array().back().get("messages");
      msgs.push(l.substr(5));
      traces.array().back().set("messages", msgs);
    }
  }
  if (!traces.as_array().empty()) {
    json::Value doc;
    doc.set("schema", "opforge.chakra-regress/1");
    doc.set("source", "parsed from the output of `opforge chakra regress` (it reports no timings)");
    doc.set("seconds_total", seconds);
    doc.set("traces", traces);
    files::write_atomic(out, json::dump(doc));
  }
}

void step_chakra(CellRun& c) {
  if (c.blocked) return c.skip("chakra", "build failed");
  std::string opforge = c.build + "/harness/opforge";
  // `--help` of an unknown subcommand prints the parent's help, so look for the name in the
  // chakra group's own listing
  std::string top, group, help;
  bool has = proc::capture({opforge, "--help"}, top, c.ps.source_dir, 30) && top.find("chakra") != std::string::npos &&
             proc::capture({opforge, "chakra", "--help"}, group, c.ps.source_dir, 30) &&
             group.find("regress") != std::string::npos;
  if (!has || !proc::capture({opforge, "chakra", "regress", "--help"}, help, c.ps.source_dir, 30))
    return c.skip("chakra", "this build has no `opforge chakra regress`");
  auto& s = c.begin("chakra");
  files::make_dirs(c.dir + "/chakra");
  std::string out = c.dir + "/chakra/regress.json";
  std::vector<std::string> argv{opforge, "chakra", "regress"};
  if (help.find("--json") != std::string::npos) argv.insert(argv.end(), {"--json", out + ".partial"});
  else if (help.find("--out") != std::string::npos) argv.insert(argv.end(), {"--out", out + ".partial"});
  bool ok = c.exec(s, argv, {}, c.ps.source_dir, c.timeout("chakra"));
  std::error_code ec;
  if (fs::exists(out + ".partial", ec)) {
    fs::rename(out + ".partial", out, ec);
  } else {
    write_regress_json_from_log(c.dir + "/" + s.log, s.seconds, out);
  }
  if (fs::exists(out, ec)) c.record.set("chakra", "chakra/regress.json");
  if (!ok) {
    // the tool's own one-line reason (e.g. a missing corpus) says more than an exit status
    std::string text;
    files::read_if_exists(c.dir + "/" + s.log, text);
    size_t at = text.rfind("\nFAIL: ");
    if (at != std::string::npos)
      s.detail = text.substr(at + 7, text.find('\n', at + 1) - at - 7) + " (" + s.detail + ")";
    return;
  }
  // An exit status of 0 is not enough: a step that converted nothing did no work, and the report
  // must not call that a pass.
  std::string why;
  try {
    std::vector<ChakraOutcome> traces;
    if (fs::exists(out, ec)) traces = read_chakra_json(out, c.cell.name);
    why = chakra_no_work_reason(traces);
  } catch (const std::exception& e) {
    why = std::string("unreadable record: ") + e.what();
  }
  if (!why.empty()) {
    s.status = "fail";
    s.detail = why;
    return;
  }
  s.detail = "regression suite passed";
}

json::Value steps_json(const std::vector<StepRecord>& steps) {
  json::Value a = json::Array{};
  for (const auto& s : steps) {
    json::Value j;
    j.set("name", s.name);
    j.set("status", s.status);
    j.set("seconds", s.seconds);
    if (!s.detail.empty()) j.set("detail", s.detail);
    if (!s.log.empty()) j.set("log", s.log);
    a.push(j);
  }
  return a;
}

json::Value options_json(const Options& o) {
  json::Value v = json::Object{};
  for (const auto& [k, lit] : o) v.set(k, lit);
  return v;
}

// Runs one cell end to end and writes its cell.json last.
std::string run_cell(CellRun& c) {
  auto t0 = std::chrono::steady_clock::now();
  std::string started = utc_timestamp();
  std::error_code ec;
  fs::remove(c.dir + "/cell.json", ec);
  files::make_dirs(c.dir + "/logs");
  c.record = json::Object{};
  c.record.set("gpu_debt", json::Array{});
  c.record.set("build_dir", c.build);  // beside the source, not in the cell: see build_dir.h
  using StepFn = void (*)(CellRun&);
  for (StepFn f : {step_setup, step_compile, step_test, step_inventory, step_bench, step_callgrind, step_chakra}) {
    if (c.stopped()) break;
    f(c);
  }
  bool interrupted = c.stopped();
  bool failed = false;
  for (const auto& s : c.steps) failed = failed || (s.status != "pass" && s.status != "skip");
  std::string status = interrupted ? "interrupted" : failed ? "fail" : "pass";
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  json::Value cell;
  cell.set("schema", "opforge.cell/1");
  cell.set("id", c.cell.id);
  cell.set("name", c.cell.name);
  cell.set("origin", c.cell.origin);
  cell.set("options", options_json(c.cell.options));
  cell.set("status", status);
  cell.set("host", host_name());
  cell.set("started_utc", started);
  cell.set("finished_utc", utc_timestamp());
  cell.set("seconds", secs);
  cell.set("steps", steps_json(c.steps));
  for (const auto& [k, v] : c.record.as_object()) cell.set(k, v);
  files::write_atomic(c.dir + "/cell.json", json::dump(cell));
  if (!c.opt.keep_builds && !interrupted) fs::remove_all(c.build, ec);

  std::string line = std::string(status == "pass"   ? "PASS"
                                 : status == "fail" ? "FAIL"
                                                    : "STOP") +
                     "  cell " + std::to_string(c.index) + " " + c.cell.name + " (" + c.cell.id + ") " +
                     format_duration(secs) + ":";
  for (const auto& s : c.steps) line += " " + s.name + "=" + s.status + "(" + format_duration(s.seconds) + ")";
  for (const auto& s : c.steps)  // the first failure's own words, so the console line says why
    if (s.status != "pass" && s.status != "skip" && s.status != "blocked" && s.status != "interrupted") {
      line += " -- " + s.name + ": " + s.detail.substr(0, s.detail.find('\n'));
      break;
    }
  c.progress.done(c.slot, line);
  return status;
}

json::Value cells_json(const Plan& plan) {
  json::Value a = json::Array{};
  for (const auto& c : plan.cells) {
    json::Value j;
    j.set("id", c.id);
    j.set("name", c.name);
    j.set("origin", c.origin);
    j.set("options", options_json(c.options));
    a.push(j);
  }
  return a;
}

// The run directory, absolute; a resumed run's own plan and manifest are read back from it.
std::string open_run_dir(PlanSource& ps, const RunOptions& opt, json::Value& manifest) {
  std::string run_dir = opt.run_dir;
  if (opt.resume) {
    ps.plan = Plan::from_json(json::parse_file(run_dir + "/plan.json"), run_dir + "/plan.json");
    manifest = json::parse_file(run_dir + "/run.json");
  } else {
    if (run_dir.empty()) run_dir = ps.source_dir + "/results/runs/" + utc_compact_timestamp() + "-" + host_name();
    if (files::exists(run_dir + "/run.json")) throw Error(run_dir + ": a run is already recorded here (use --resume)");
    files::make_dirs(run_dir);
  }
  return fs::absolute(run_dir).lexically_normal().string();
}

// The plan's cells that --cell names (all without it), in plan order.
std::vector<const Cell*> select_cells(const Plan& plan, const RunOptions& opt) {
  std::vector<const Cell*> todo;
  for (const auto& c : plan.cells) {
    bool wanted = opt.cells.empty();
    for (const auto& k : opt.cells) wanted = wanted || k == c.id || k == c.name;
    if (wanted) todo.push_back(&c);
  }
  for (const auto& k : opt.cells)
    if (!plan.find(k)) throw Error("no cell '" + k + "' in " + plan.matrix_path + " (see `opforge matrix plan`)");
  return todo;
}

// What a new run is: source, toolchain, machine, matrix and cells; writes plan.json.
void record_new_run(json::Value& manifest, const PlanSource& ps, const std::string& run_dir, const RunOptions& opt) {
  manifest.set("schema", "opforge.run/1");
  manifest.set("run", fs::path(run_dir).filename().string());
  manifest.set("created_utc", utc_timestamp());
  manifest.set("source_dir", ps.source_dir);
  manifest.set("git", git_state(ps.source_dir));
  manifest.set("toolchain", toolchain_versions());
  manifest.set("toolchain_identity", ps.plan.toolchain);
  manifest.set("machine", machine_facts());
  if (opt.measure_bandwidth) manifest.set("bandwidth", bandwidth_probe());
  json::Value m;
  m.set("file", ps.plan.matrix_path);
  m.set("sha256", hash::sha256_hex(ps.plan.matrix_text));
  m.set("cartesian_cells", ps.plan.cartesian);
  m.set("planned_cells", int64_t(ps.plan.cells.size()));
  manifest.set("matrix", m);
  manifest.set("cells", cells_json(ps.plan));
  files::write_atomic(run_dir + "/plan.json", json::dump(ps.plan.to_json()));
}

void record_resumption(json::Value& manifest) {
  json::Value r = manifest.get("resumed_utc").is_array() ? manifest.get("resumed_utc") : json::Value(json::Array{});
  r.push(utc_timestamp());
  manifest.set("resumed_utc", r);
}

json::Value settings_json(const Plan& plan, const RunOptions& opt, bool bench) {
  json::Value settings;
  settings.set("jobs", opt.jobs);
  settings.set("bench", bench);
  settings.set("callgrind", plan.run.callgrind);
  json::Value bargs = json::Array{};
  for (const auto& a : plan.run.bench_args) bargs.push(a);
  settings.set("bench_args", bargs);
  json::Value to = json::Object{};
  for (const auto& [k, s] : plan.run.timeouts) to.set(k, opt.step_timeout > 0 ? opt.step_timeout : s);
  settings.set("timeouts", to);
  return settings;
}

struct StopHandlers {
  struct sigaction old_int {};
  struct sigaction old_term {};
};

// SIGINT/SIGTERM stop the running steps (a second one exits at once); the old handlers come back
// with restore_stop_handlers.
StopHandlers install_stop_handlers() {
  StopHandlers old;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  g_stop = false;
  g_signals = 0;
  sigaction(SIGINT, &sa, &old.old_int);
  sigaction(SIGTERM, &sa, &old.old_term);
  return old;
}

void restore_stop_handlers(const StopHandlers& old) {
  sigaction(SIGINT, &old.old_int, nullptr);
  sigaction(SIGTERM, &old.old_term, nullptr);
}

// --resume keeps the cells the interrupted run finished and runs the others.
std::vector<const Cell*> cells_left_to_run(const std::vector<const Cell*>& todo, const RunOptions& opt,
                                           const std::string& run_dir, RunSummary& sum) {
  std::vector<const Cell*> pending;
  for (const auto* c : todo) {
    if (opt.resume && cell_finished(run_dir + "/cells/" + c->id)) {
      ++sum.skipped_finished;
      std::fprintf(stderr, "done  %s (%s): finished in the interrupted run, kept\n", c->name.c_str(), c->id.c_str());
    } else {
      pending.push_back(c);
    }
  }
  return pending;
}

// What the workers share: the cells to run, taken in order through `next`, and the counts.
struct CellQueue {
  const PlanSource& ps;
  const OpManifest& manifest_ops;
  const RunOptions& opt;
  const std::string& run_dir;
  const std::vector<const Cell*>& todo;
  const std::vector<const Cell*>& pending;
  bool bench;
  int build_jobs;
  Progress& progress;
  RunSummary& sum;
  std::atomic<size_t> next{0};
  std::mutex mu;
};

// An unexpected harness error in one cell is recorded as its cell.json; the run goes on.
std::string run_cell_recording_errors(CellQueue& q, const Cell& cell, int slot) {
  CellRun c(q.ps, q.manifest_ops, cell, q.opt, q.progress);
  c.index = int(std::find(q.todo.begin(), q.todo.end(), &cell) - q.todo.begin()) + 1;
  c.slot = slot;
  c.bench = q.bench;
  c.callgrind = q.ps.plan.run.callgrind;
  c.build_jobs = q.build_jobs;
  c.dir = q.run_dir + "/cells/" + cell.id;
  c.build = build_dir_beside_source(q.ps.source_dir, "cell-" + cell.id, q.run_dir, c.dir + "/build");
  try {
    return run_cell(c);
  } catch (const std::exception& e) {
    json::Value cj;
    cj.set("schema", "opforge.cell/1");
    cj.set("id", cell.id);
    cj.set("name", cell.name);
    cj.set("options", options_json(cell.options));
    cj.set("status", "fail");
    cj.set("error", e.what());
    cj.set("steps", steps_json(c.steps));
    files::write_atomic(c.dir + "/cell.json", json::dump(cj));
    q.progress.done(slot, "FAIL  cell " + cell.name + ": " + e.what());
    return "fail";
  }
}

void work_through_cells(CellQueue& q, int slot) {
  while (!g_stop) {
    size_t k = q.next.fetch_add(1);
    if (k >= q.pending.size()) break;
    std::string st = run_cell_recording_errors(q, *q.pending[k], slot);
    std::lock_guard<std::mutex> lk(q.mu);
    if (st == "pass") ++q.sum.passed;
    else if (st == "fail") ++q.sum.failed;
  }
}

void run_cells_on_workers(CellQueue& q, int jobs) {
  std::vector<std::thread> threads;
  for (int j = 0; j < jobs; ++j) threads.emplace_back(work_through_cells, std::ref(q), j);
  for (auto& t : threads) t.join();
}

// Run-level records from every finished cell on disk, this session's and earlier ones'.
void record_run_outcome(json::Value& manifest, const Plan& plan, const std::string& run_dir, bool interrupted) {
  json::Value debt = gpu_debt_ledger(run_dir, manifest.get("git").str("sha"));
  const auto& items = debt.get("items");
  int passed = 0, failed = 0;
  for (const auto& cell : finished_cells(run_dir)) (cell.str("status") == "pass" ? passed : failed)++;
  files::write_atomic(run_dir + "/gpu_debt.json", json::dump(debt));
  json::Value s;
  s.set("cells_planned", int64_t(plan.cells.size()));
  s.set("cells_finished", passed + failed);
  s.set("passed", passed);
  s.set("failed", failed);
  s.set("gpu_debt", int64_t(items.as_array().size()));
  manifest.set("summary", s);
  manifest.set("status", interrupted                                 ? "interrupted"
                         : passed + failed == int(plan.cells.size()) ? "finished"
                                                                     : "partial");
  manifest.set("updated_utc", utc_timestamp());
  files::write_atomic(run_dir + "/run.json", json::dump(manifest));
}

}  // namespace

std::string chakra_no_work_reason(const std::vector<ChakraOutcome>& traces) {
  for (const auto& t : traces)
    if (t.status == "pass") return "";
  if (traces.empty()) return "converted zero traces: `opforge chakra regress` reported no trace";
  return "converted zero traces: none of the " + std::to_string(traces.size()) + " reported passed";
}

void request_stop() { g_stop = true; }

RunSummary run_matrix(const PlanSource& ps_in, const RunOptions& opt) {
  PlanSource ps = ps_in;
  RunSummary sum;
  json::Value manifest;
  const std::string run_dir = open_run_dir(ps, opt, manifest);
  sum.run_dir = run_dir;
  auto manifest_ops = OpManifest::read(ps.source_dir + "/kernels/manifest.toml");
  std::vector<const Cell*> todo = select_cells(ps.plan, opt);
  sum.total = int(todo.size());

  // the run manifest is written before any cell so an interrupted run still says what it was
  if (!opt.resume) {
    record_new_run(manifest, ps, run_dir, opt);
  } else {
    record_resumption(manifest);
  }
  bool bench = opt.bench < 0 ? ps.plan.run.bench : opt.bench > 0;
  manifest.set("settings", settings_json(ps.plan, opt, bench));
  manifest.set("status", "running");
  manifest.set("updated_utc", utc_timestamp());
  files::write_atomic(run_dir + "/run.json", json::dump(manifest));

  StopHandlers old_handlers = install_stop_handlers();
  std::vector<const Cell*> pending = cells_left_to_run(todo, opt, run_dir, sum);
  int jobs = std::max(1, opt.jobs);
  int cores = int(std::max(1u, std::thread::hardware_concurrency()));
  Progress progress(int(todo.size()));
  CellQueue q{ps, manifest_ops, opt, run_dir, todo, pending, bench, std::max(1, cores / jobs), progress, sum, {0}, {}};
  run_cells_on_workers(q, jobs);
  progress.stop();
  sum.interrupted = g_stop.load();
  restore_stop_handlers(old_handlers);

  record_run_outcome(manifest, ps.plan, run_dir, sum.interrupted);
  return sum;
}

}  // namespace opf::matrix
