#include "matrix/ab.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

#include "matrix/build_dir.h"
#include "matrix/callgrind.h"
#include "common/files.h"
#include "matrix/json.h"
#include "matrix/machine.h"
#include "matrix/paired_verdict.h"
#include "matrix/process.h"
#include "matrix/serve_client.h"
#include "opforge/build_info.h"
#include "opforge/error.h"
#include "opforge/threads.h"

namespace opf::matrix {
namespace {
namespace fs = std::filesystem;

struct Side {
  std::string name;  // base | head
  std::string arg, kind, source, build, sha;
  std::vector<std::pair<std::string, std::string>> env;
};

double median_of(std::vector<double> v) {
  if (v.empty()) return NAN;
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::string trim(std::string s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  return s;
}

// A build dir is used as it is (brought up to date by ninja); a source dir is built in it
// (build_dir.h: where ccache serves what build/ compiled; under out if it is not writable);
// anything else must name a commit of the repository, exported with `git archive` (the user's
// checkout and its worktree list are never touched).
void resolve(Side& s, const AbOptions& o) {
  std::error_code ec;
  if (fs::is_directory(s.arg, ec) && fs::exists(fs::path(s.arg) / "build.ninja", ec)) {
    s.kind = "build";
    s.build = fs::absolute(s.arg).lexically_normal().string();
    return;
  }
  if (fs::is_directory(s.arg, ec) && fs::exists(fs::path(s.arg) / "meson.build", ec)) {
    s.kind = "source";
    s.source = fs::absolute(s.arg).lexically_normal().string();
  } else {
    const std::string repo = o.repo.empty() ? build::source_root() : o.repo;
    std::string sha;
    if (!proc::capture({"git", "-C", repo, "rev-parse", "--verify", "--quiet", s.arg + "^{commit}"}, sha, "", 60) ||
        trim(sha).empty())
      throw Error("--" + s.name + " '" + s.arg +
                  "': neither a directory with meson.build or build.ninja nor a commit of " + repo);
    s.kind = "revision";
    s.sha = trim(sha);
    s.source = o.out + "/src-" + s.sha.substr(0, 12);
    if (!fs::exists(s.source + "/.opforge-ab-exported", ec)) {
      const std::string tmp = s.source + ".tmp";
      fs::remove_all(tmp, ec);
      files::make_dirs(tmp);
      const std::string tar = tmp + ".tar";
      auto r = proc::run({{"git", "-C", repo, "archive", "--format=tar", "-o", tar, s.sha},
                          "",
                          {},
                          o.out + "/" + s.name + "-export.log",
                          300});
      if (!r.ok())
        throw Error("--" + s.name + " " + s.arg + ": git archive failed (" + r.describe() + ", see " + o.out + "/" +
                    s.name + "-export.log)");
      r = proc::run({{"tar", "-xf", tar, "-C", tmp}, "", {}, o.out + "/" + s.name + "-export.log", 300});
      fs::remove(tar, ec);
      if (!r.ok()) throw Error("--" + s.name + " " + s.arg + ": extracting the export failed (" + r.describe() + ")");
      files::write_atomic(tmp + "/.opforge-ab-exported", s.sha + "\n");
      fs::remove_all(s.source, ec);
      fs::rename(tmp, s.source, ec);
      if (ec) throw Error(s.source + ": " + ec.message());
    }
  }
  s.build = build_dir_beside_source(s.source, "ab-" + s.name, o.out, o.out + "/build-" + s.name);
}

// Ops of a tree: meson_options.txt features with a kernels/ops/<name>/ folder.
std::set<std::string> tree_ops(const std::string& source) {
  std::set<std::string> ops;
  std::ifstream f(source + "/meson_options.txt");
  const std::regex opt(R"(^option\('([a-z0-9_]+)',\s*type:\s*'feature')");
  std::error_code ec;
  for (std::string line; std::getline(f, line);)
    if (std::smatch m; std::regex_search(line, m, opt) && fs::is_directory(source + "/kernels/ops/" + m[1].str(), ec))
      ops.insert(m[1].str());
  return ops;
}

std::vector<std::string> setup_args(const Side& s, const AbOptions& o) {
  std::vector<std::string> a{"-Dmode=prebuilt",
                             "-Dbench=enabled",
                             "-Dtests=disabled",
                             "-Dchakra=disabled",
                             "-Dcuda=disabled",
                             "-Dhip=disabled",
                             std::string("-Dpeers_torch=") + (o.peers ? "auto" : "disabled")};
  if (!o.ops.empty())
    for (const std::string& op : tree_ops(s.source))
      a.push_back("-D" + op + "=" + (std::count(o.ops.begin(), o.ops.end(), op) ? "enabled" : "disabled"));
  for (const std::string& m : o.meson_options) a.push_back("-D" + m);
  return a;
}

void build(Side& s, const AbOptions& o) {
  const std::string log = o.out + "/" + s.name + "-build.log";
  std::error_code ec;
  if (s.kind != "build") {
    std::vector<std::string> args = setup_args(s, o);
    std::string want = s.source + "\n";
    for (const auto& a : args) want += a + "\n";
    std::string have;
    files::read_if_exists(s.build + "/opforge-ab.setup", have);
    if (have != want || !fs::exists(s.build + "/build.ninja", ec)) {
      fs::remove_all(s.build, ec);  // ab's own directory, configured for another tree or options
      std::vector<std::string> argv{"meson", "setup", s.build, s.source};
      argv.insert(argv.end(), args.begin(), args.end());
      std::fprintf(stderr, "opforge ab: %s: configuring %s\n", s.name.c_str(), s.build.c_str());
      auto r = proc::run({argv, "", {}, log, 1800});
      if (!r.ok())
        throw Error("--" + s.name + " " + s.arg + ": meson setup failed (" + r.describe() + ", see " + log + ")");
      files::write_atomic(s.build + "/opforge-ab.setup", want);
    }
  }
  if (!(o.no_build && s.kind == "build")) {
    // Only what ab runs: the benchmark and instruction drivers and the op modules they load
    // (a whole build would compile the CLI, the tests and Chakra for nothing).
    std::string targets;
    if (!proc::capture({"ninja", "-C", s.build, "-t", "targets", "all"}, targets, "", 120))
      throw Error("--" + s.name + " " + s.arg + ": cannot list the build's targets (ninja -t targets in " + s.build +
                  ")");
    std::vector<std::string> argv{"ninja", "-C", s.build, "harness/suites/opforge-kernel-bench"};
    std::istringstream lines(targets);
    for (std::string line; std::getline(lines, line);) {
      const std::string t = line.substr(0, line.find(':'));
      if (t == "harness/suites/opforge-kernel-instr" ||
          (t.rfind("kernels/opf_", 0) == 0 && t.size() > 3 && t.compare(t.size() - 3, 3, ".so") == 0))
        argv.push_back(t);
    }
    std::fprintf(stderr, "opforge ab: %s: building %s (%zu targets)\n", s.name.c_str(), s.build.c_str(),
                 argv.size() - 3);
    auto r = proc::run({argv, "", {}, log, 7200});
    if (!r.ok()) throw Error("--" + s.name + " " + s.arg + ": build failed (" + r.describe() + ", see " + log + ")");
  }
  if (!fs::exists(s.build + "/harness/suites/opforge-kernel-bench", ec))
    throw Error("--" + s.name + " " + s.arg + ": " + s.build +
                " has no harness/suites/opforge-kernel-bench (benchmarks disabled there)");
}

enum class Role { gated, control };

struct Bench {
  std::string name, note, verdict;
  Role role = Role::gated;
  std::vector<double> base_ns, head_ns, ratios;
  PairedVerdict v;
  std::vector<std::string> per_run;
  // The second pair of processes' verdicts on this benchmark's SLOWER run(s) (confirm_slower), by
  // run: -1 the verdict over all rounds, else the --repeat run's index.
  std::vector<std::pair<int, PairedVerdict>> confirmations;
};

// The op a benchmark times: <op>/... or peer/<lib>/<op>/... ("" for anything else).
std::string op_of(const std::string& name) {
  if (name.rfind("peer/", 0) != 0) return name.substr(0, name.find('/'));
  const size_t a = name.find('/', 5);
  return a == std::string::npos ? "" : name.substr(a + 1, name.find('/', a + 1) - a - 1);
}

bool is_selected(const std::string& name, const AbOptions& o, const std::regex* filter, Role& role) {
  if (name.rfind("probe/", 0) == 0) return role = Role::control, true;
  const bool peer = name.rfind("peer/", 0) == 0;
  if (peer && !o.peers) return false;
  const std::string op = op_of(name);
  if (!o.ops.empty() && !std::count(o.ops.begin(), o.ops.end(), op)) return false;
  if (filter && !std::regex_search(name, *filter)) return false;
  role = peer ? Role::control : Role::gated;
  return true;
}

double parse_ns(const std::string& reply, const std::string& side, const std::string& name) {
  double ns = 0;
  long long calls = 0;
  if (std::sscanf(reply.c_str(), "ns %lf %lld", &ns, &calls) != 2 || !(ns > 0))
    throw Error(side + ": " + name + ": " +
                (reply.rfind("error ", 0) == 0 ? reply.substr(6) : "unexpected reply '" + reply + "'"));
  return ns;
}

json::Value side_json(const Side& s) {
  json::Value v;
  v.set("arg", s.arg);
  v.set("kind", s.kind);
  if (!s.source.empty()) v.set("source", s.source);
  v.set("build", s.build);
  if (!s.sha.empty()) v.set("sha", s.sha);
  else if (!s.source.empty()) v.set("git", git_state(s.source));
  json::Value env;
  for (const auto& [k, val] : s.env) env.set(k, val);
  if (!s.env.empty()) v.set("env", env);
  return v;
}

// Instruction counts of one build: opforge-kernel-instr under callgrind (as the matrix runner's
// callgrind step). Returns the counts by case, or sets `skip` with the reason none can be taken.
std::map<std::string, double> instructions(const Side& s, const AbOptions& o, std::string& skip) {
  const std::string driver = s.build + "/harness/suites/opforge-kernel-instr";
  std::map<std::string, double> out;
  std::string version;
  if (!files::exists(driver)) return skip = "no opforge-kernel-instr in " + s.build, out;
  if (!proc::capture({"valgrind", "--version"}, version, "", 30)) return skip = "valgrind not found", out;
  const std::string tmp = o.out + "/callgrind-" + s.name;
  const std::string log = o.out + "/" + s.name + "-callgrind.log";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  files::make_dirs(tmp);
  auto r = proc::run(
      {{"valgrind", "--tool=callgrind", "--collect-atstart=no", "--callgrind-out-file=" + tmp + "/callgrind.out",
        driver, "--calls=" + std::to_string(kCallgrindCalls)},
       s.build,
       s.env,
       log,
       3600});
  if (!r.ok()) {
    std::string text;
    files::read_if_exists(log, text);
    fs::remove_all(tmp, ec);
    if (std::string why = valgrind_cannot_run_reason(text); !why.empty()) return skip = why, out;
    throw Error(s.name + ": callgrind run failed (" + r.describe() + ", see " + log + ")");
  }
  const json::Value doc = callgrind_json(read_callgrind_dir(tmp), kCallgrindCalls);
  fs::remove_all(tmp, ec);
  for (const auto& b : doc.get("benchmarks").as_array()) out[b.str("name")] = b.num("instructions");
  return out;
}

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

// Every check on the options that needs no tree, before anything is built or written.
void validate_options(const AbOptions& o) {
  if (o.base.empty() || o.head.empty()) throw Error("--base and --head are required");
  if (o.out.empty()) throw Error("--out DIR is required");
  if (o.rounds < 2 || o.rounds > 1000) throw Error("--rounds must be in [2, 1000]");
  if (o.repeat < 1 || o.repeat > 1000) throw Error("--repeat must be in [1, 1000]");
  if (!(o.block_seconds > 0 && o.block_seconds <= 10)) throw Error("--block-seconds must be in (0, 10]");
  if (!(o.threshold > 0 && o.threshold < 1) || !(o.alpha > 0 && o.alpha < 1))
    throw Error("--threshold and --alpha must be fractions in (0, 1)");
}

std::unique_ptr<std::regex> compile_filter(const AbOptions& o) {
  std::unique_ptr<std::regex> filter;
  if (!o.filter.empty()) {
    try {
      filter = std::make_unique<std::regex>(o.filter);
    } catch (const std::regex_error& e) {
      throw Error("--filter '" + o.filter + "': not a regular expression (" + e.what() + ")");
    }
  }
  return filter;
}

// A later run with the same out reuses its builds, but never replaces a result unasked.
void prepare_out_dir(AbOptions& o) {
  o.out = fs::absolute(o.out).lexically_normal().string();
  files::make_dirs(o.out);
  if (files::exists(o.out + "/ab.json") && !o.force)
    throw Error(o.out + "/ab.json exists; not overwriting it (pass --force, or another --out)");
}

// An --op neither tree has is a typo, not an empty comparison (build dirs alone cannot tell).
void check_ops_exist(const Side& base, const Side& head, const AbOptions& o) {
  if (o.ops.empty()) return;
  std::set<std::string> known;
  for (const Side* s : {&base, &head})
    if (!s->source.empty()) known.merge(tree_ops(s->source));
  for (const std::string& op : o.ops)
    if (!known.empty() && !known.count(op)) throw Error("--op " + op + ": no such op in either tree");
}

bool same_bytes(const std::string& a, const std::string& b) {
  std::string x, y;
  return files::read_if_exists(a, x) && files::read_if_exists(b, y) && x == y;
}

// --skip-identical: the ops whose CPU module (kernels/opf_<op>_cpu.so) is the same bytes in both
// builds. Timing them would measure only the machine: the code under test is the same.
std::set<std::string> identical_modules(const Side& base, const Side& head) {
  std::set<std::string> ops;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(head.build + "/kernels", ec)) {
    const std::string f = e.path().filename().string(), prefix = "opf_", suffix = "_cpu.so";
    if (f.size() <= prefix.size() + suffix.size() || f.rfind(prefix, 0) != 0 ||
        f.compare(f.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    if (same_bytes(e.path().string(), base.build + "/kernels/" + f))
      ops.insert(f.substr(prefix.size(), f.size() - prefix.size() - suffix.size()));
  }
  return ops;
}

struct Selection {
  std::vector<Bench> benches;  // in both builds, probes last
  std::vector<std::string> only_head, only_base;
  std::vector<std::string> identical;  // --skip-identical: not timed, their op's module is the same bytes
  size_t gated = 0;
};

Selection select_benchmarks(const std::vector<std::string>& base_names, const std::vector<std::string>& head_names,
                            const AbOptions& o, const std::regex* filter, const std::set<std::string>& identical) {
  const std::set<std::string> in_base(base_names.begin(), base_names.end()),
      in_head(head_names.begin(), head_names.end());
  Selection sel;
  for (const std::string& n : head_names) {
    Role role;
    if (!is_selected(n, o, filter, role)) continue;
    if (!in_base.count(n)) {
      sel.only_head.push_back(n);
      continue;
    }
    if (n.rfind("probe/", 0) != 0 && identical.count(op_of(n))) {
      sel.identical.push_back(n);
      continue;
    }
    Bench x;
    x.name = n;
    x.role = role;
    sel.benches.push_back(x);
  }
  for (const std::string& n : base_names) {
    Role role;
    if (is_selected(n, o, filter, role) && !in_head.count(n)) sel.only_base.push_back(n);
  }
  // Probes last: a control says most about the pairing once the run has settled (the first
  // seconds after another run's processes exit read up to 35 % apart here).
  std::stable_partition(sel.benches.begin(), sel.benches.end(),
                        [](const Bench& x) { return x.name.rfind("probe/", 0) != 0; });
  sel.gated =
      std::count_if(sel.benches.begin(), sel.benches.end(), [](const Bench& x) { return x.role == Role::gated; });
  if (sel.gated == 0 && sel.identical.empty())
    throw Error("no benchmark of both builds matches" + std::string(o.ops.empty() ? "" : " the --op list") +
                (o.filter.empty() ? "" : " and --filter") + " (nothing to compare)");
  return sel;
}

// Settle first: both processes stream the triad for a second each, unrecorded (page faults,
// clocks, the teardown of whatever ran before).
void settle_with_probes(ServeClient& b, ServeClient& h, const std::vector<Bench>& benches) {
  for (const Bench& x : benches)
    if (x.name.rfind("probe/", 0) == 0) {
      b.send("prepare " + x.name);
      h.send("prepare " + x.name);
      const std::string rb = b.receive(600), rh = h.receive(600);
      // a probe a side cannot prepare is not timed here: its own turn records why (FAILED / NEW)
      if (rb != "ok" || rh != "ok") continue;
      // the settling samples are discarded, whatever they read
      b.request("time " + x.name + " 1", 300), h.request("time " + x.name + " 1", 300);
    }
}

// Both sides prepare the case at once; false (with verdict and note set) when either cannot run it.
bool prepare_both(ServeClient& b, ServeClient& h, Bench& x) {
  b.send("prepare " + x.name);
  h.send("prepare " + x.name);
  const std::string rb = b.receive(1800), rh = h.receive(1800);
  if (rb == "ok" && rh == "ok") return true;
  const std::string why_b = rb == "ok" ? "" : rb.substr(rb.find(' ') + 1),
                    why_h = rh == "ok" ? "" : rh.substr(rh.find(' ') + 1);
  x.verdict = why_h.empty() ? "NEW" : why_b.empty() ? "FAILED" : "SKIPPED";
  x.note = why_h.empty() ? "base cannot run it: " + why_b : why_b.empty() ? "head cannot run it: " + why_h : why_h;
  if (x.role == Role::control && x.verdict == "FAILED") x.verdict = "SKIPPED";
  return false;
}

// The rounds of one benchmark: one block per side per round, the order alternating so that
// whichever side goes second does not always get the warmer machine.
void time_rounds(ServeClient& b, ServeClient& h, Bench& x, const AbOptions& o) {
  const double time_timeout = o.block_seconds * 100 + 300;
  const std::string block = " " + fmt("%g", o.block_seconds);
  parse_ns(b.request("time " + x.name + block, time_timeout), "base", x.name);  // warm-up, both
  parse_ns(h.request("time " + x.name + block, time_timeout), "head", x.name);
  for (int r = 0; r < o.rounds; ++r) {
    if (o.restage) {  // both at once: staging is not timed
      b.send("restage " + x.name);
      h.send("restage " + x.name);
      const std::string sb = b.receive(1800), sh = h.receive(1800);
      if (sb != "ok" || sh != "ok")
        throw Error(x.name + ": staging again failed: " + (sb != "ok" ? "base: " + sb : "head: " + sh));
    }
    double tb, th;
    if (r % 2 == 0) {
      tb = parse_ns(b.request("time " + x.name + block, time_timeout), "base", x.name);
      th = parse_ns(h.request("time " + x.name + block, time_timeout), "head", x.name);
    } else {
      th = parse_ns(h.request("time " + x.name + block, time_timeout), "head", x.name);
      tb = parse_ns(b.request("time " + x.name + block, time_timeout), "base", x.name);
    }
    x.base_ns.push_back(tb);
    x.head_ns.push_back(th);
    x.ratios.push_back(th / tb);
  }
}

// A pair of benchmark servers, one per build, numbered (OPFORGE_AB_PAIR; kernel_bench's
// calibration slowdown can target one pair). Callers alternate which side starts first, so that
// neither build always gets the first process's place.
struct ServerPair {
  std::unique_ptr<ServeClient> b, h;
};

std::vector<std::pair<std::string, std::string>> pair_env(const Side& s, int pair) {
  auto env = s.env;
  env.emplace_back("OPFORGE_AB_PAIR", std::to_string(pair));
  return env;
}

ServerPair start_pair(const Side& base, const Side& head, const AbOptions& o, int number, bool base_first) {
  auto start = [&](const Side& s) {
    const std::string log =
        o.out + "/" + s.name + "-serve" + (number == 1 ? "" : "-" + std::to_string(number)) + ".log";
    return std::make_unique<ServeClient>(
        s.name, std::vector<std::string>{s.build + "/harness/suites/opforge-kernel-bench", "--ab-serve"},
        pair_env(s, number), log);
  };
  ServerPair p;
  if (base_first) {
    p.b = start(base);
    p.h = start(head);
  } else {
    p.h = start(head);
    p.b = start(base);
  }
  return p;
}

// The last `rounds` ratios of x: the run just measured.
PairedVerdict last_run_verdict(const Bench& x, const AbOptions& o) {
  return paired_verdict(std::vector<double>(x.ratios.end() - o.rounds, x.ratios.end()), o.threshold, o.alpha);
}

// One run: every benchmark timed `rounds` rounds by one pair of processes. Returns the benchmarks
// it measured (a benchmark either side cannot run keeps the verdict prepare_both gave it).
std::vector<Bench*> measure_run(ServerPair& p, std::vector<Bench>& benches, const AbOptions& o, int run) {
  const std::string tag = o.repeat > 1 ? "run " + std::to_string(run + 1) + "/" + std::to_string(o.repeat) + " " : "";
  std::vector<Bench*> measured;
  size_t done = 0;
  for (Bench& x : benches) {
    ++done;
    const bool fresh = run == 0 || !x.ratios.empty();  // a case that could not run once is not retried
    if (!fresh || !prepare_both(*p.b, *p.h, x)) {
      if (run == 0)
        std::fprintf(stderr, "[%zu/%zu] %s  %s: %s\n", done, benches.size(), x.name.c_str(), x.verdict.c_str(),
                     x.note.c_str());
      if (o.repeat > 1) x.per_run.push_back(x.verdict);
      continue;
    }
    time_rounds(*p.b, *p.h, x, o);
    const PairedVerdict v = last_run_verdict(x, o);
    if (o.repeat > 1) x.per_run.push_back(v.verdict);
    measured.push_back(&x);
    std::fprintf(stderr, "%s[%zu/%zu] %s  %s %.3f [%.3f, %.3f]\n", tag.c_str(), done, benches.size(), x.name.c_str(),
                 (x.role == Role::control ? "control " + v.verdict : v.verdict).c_str(), v.median, v.lo, v.hi);
  }
  return measured;
}

// SLOWER is kept only where another pair of processes, started in the other order, agrees (ab.h):
// it settles like the first and times `rounds` fresh rounds per SLOWER verdict. One not confirmed
// becomes AMBIGUOUS, with both readings in the note. `run`: the --repeat run whose verdicts these
// are (-1: the verdict over all rounds).
void confirm_slower(const Side& base, const Side& head, const std::vector<Bench*>& candidates, const AbOptions& o,
                    int run, int pair, bool base_first) {
  std::vector<Bench*> todo;
  for (Bench* x : candidates)
    if (x->role == Role::gated && (run < 0 ? x->verdict : x->per_run[size_t(run)]) == "SLOWER") todo.push_back(x);
  if (!o.confirm || todo.empty()) return;
  std::fprintf(stderr, "confirming %zu SLOWER verdict(s) with another pair of processes\n", todo.size());
  ServerPair p = start_pair(base, head, o, pair, base_first);
  std::vector<Bench> probes;
  for (const Bench* x : candidates)
    if (x->name.rfind("probe/", 0) == 0) probes.push_back(*x);
  settle_with_probes(*p.b, *p.h, probes);
  for (Bench* x : todo) {
    Bench again;
    again.name = x->name;
    again.role = x->role;
    PairedVerdict v;
    if (prepare_both(*p.b, *p.h, again)) {
      time_rounds(*p.b, *p.h, again, o);
      v = paired_verdict(again.ratios, o.threshold, o.alpha);
    } else {
      v.verdict = "not measured (" + again.note + ")";
    }
    x->confirmations.emplace_back(run, v);
    if (v.verdict != "SLOWER") {
      const PairedVerdict first = run < 0 ? x->v : last_run_verdict(*x, o);
      const std::string why = "SLOWER " + (run < 0 ? std::string() : "in run " + std::to_string(run + 1) + " ") +
                              fmt("%.3f [%.3f, %.3f]", first.median, first.lo, first.hi) +
                              " in the first pair of processes, " + v.verdict +
                              (v.rounds > 0 ? fmt(" %.3f [%.3f, %.3f]", v.median, v.lo, v.hi) : "") + " in another";
      if (run < 0) x->verdict = "AMBIGUOUS";
      else x->per_run[size_t(run)] = "AMBIGUOUS";
      x->note += (x->note.empty() ? "" : "; ") + why;
    }
    std::fprintf(stderr, "  %s  %s\n", x->name.c_str(), v.verdict == "SLOWER" ? "SLOWER confirmed" : x->note.c_str());
  }
}

// Every run with its own pair of processes (so that --repeat's runs are independent, like separate
// invocations, per-process biases included), each run's SLOWERs confirmed by another pair started
// in the other order; then the verdict over all rounds. Pairs are numbered 1, 2, ... as they start.
void measure_all(ServerPair& first, const Side& base, const Side& head, std::vector<Bench>& benches,
                 const AbOptions& o) {
  int pair = 1;
  for (int run = 0; run < o.repeat; ++run) {
    const bool base_first = run % 2 == 0;
    ServerPair p = run == 0 ? std::exchange(first, ServerPair{}) : start_pair(base, head, o, ++pair, base_first);
    settle_with_probes(*p.b, *p.h, benches);
    const std::vector<Bench*> measured = measure_run(p, benches, o, run);
    p = ServerPair{};  // stopped before the next pair starts
    if (o.repeat > 1) confirm_slower(base, head, measured, o, run, ++pair, !base_first);
  }
  std::vector<Bench*> all;
  for (Bench& x : benches) {
    if (x.ratios.empty() || !x.verdict.empty()) continue;  // (verdict: a run could not prepare it)
    x.v = paired_verdict(x.ratios, o.threshold, o.alpha);
    x.verdict = x.v.verdict;
    if (x.role == Role::control) x.note = "control: the same code in both builds";
    all.push_back(&x);
  }
  confirm_slower(base, head, all, o, -1, ++pair, false);
}

// Instruction counts: exact, both builds. Adds the cases over the threshold to `regressions`.
json::Value compare_instructions(const Side& base, const Side& head, const AbOptions& o, const std::regex* filter,
                                 int& regressions) {
  json::Value instr;
  if (!o.instructions) {
    instr.set("status", "skip");
    instr.set("reason", "not asked for (--no-instructions)");
    return instr;
  }
  std::string skip;
  const auto ib = instructions(base, o, skip);
  const auto ih = skip.empty() ? instructions(head, o, skip) : std::map<std::string, double>{};
  if (!skip.empty()) {
    instr.set("status", "skip");
    instr.set("reason", skip);
    return instr;
  }
  instr.set("status", "pass");
  json::Value& list = instr.set("counts", json::Value(json::Array{}));
  for (const auto& [name, n] : ih) {
    Role role;
    if (!is_selected(name, o, filter, role)) continue;
    json::Value c;
    c.set("name", name);
    c.set("head", n);
    auto it = ib.find(name);
    if (it == ib.end()) {
      c.set("verdict", "NEW");
    } else {
      // a case the base ran in 0 instructions (nothing counted) compares as equal to 0, else as more
      const double ratio = it->second > 0 ? n / it->second : n > 0 ? HUGE_VAL : 1.0;
      c.set("base", it->second);
      c.set("ratio", ratio);
      const bool worse = ratio > 1 + o.instr_threshold;
      regressions += worse;
      c.set("verdict", worse ? "REGRESSION" : ratio < 1 - o.instr_threshold ? "FEWER" : "SAME");
    }
    list.push(c);
  }
  return instr;
}

json::Value settings_json(const AbOptions& o) {
  json::Value settings;
  settings.set("rounds", o.rounds);
  settings.set("repeat", o.repeat);
  settings.set("block_seconds", o.block_seconds);
  settings.set("restage", o.restage);
  settings.set("threshold", o.threshold);
  settings.set("alpha", o.alpha);
  settings.set("instr_threshold", o.instr_threshold);
  settings.set("threads", default_num_threads());
  json::Value ops_v = json::Value(json::Array{});
  for (const auto& op : o.ops) ops_v.push(op);
  settings.set("ops", ops_v);
  settings.set("filter", o.filter);
  settings.set("peers", o.peers);
  return settings;
}

json::Value bench_json(const Bench& x) {
  json::Value j;
  j.set("name", x.name);
  j.set("role", x.role == Role::gated ? "gated" : "control");
  j.set("verdict", x.verdict);
  if (!x.ratios.empty()) {
    j.set("median_ratio", x.v.median);
    j.set("interval", json::Value(json::Array{x.v.lo, x.v.hi}));
    j.set("coverage", x.v.coverage);
    j.set("rounds", int64_t(x.ratios.size()));
    j.set("base_median_ns", median_of(x.base_ns));
    j.set("head_median_ns", median_of(x.head_ns));
    json::Value r = json::Value(json::Array{});
    for (double v : x.ratios) r.push(v);
    j.set("ratios", r);
    if (!x.per_run.empty()) {
      json::Value p = json::Value(json::Array{});
      for (const auto& s : x.per_run) p.push(s);
      j.set("per_run", p);
    }
  }
  if (!x.confirmations.empty()) {  // the second pair of processes' readings of its SLOWER run(s)
    json::Value c = json::Value(json::Array{});
    for (const auto& [k, v] : x.confirmations) {
      json::Value e;
      if (k < 0) e.set("run", "all");
      else e.set("run", int64_t(k + 1));
      e.set("verdict", v.verdict);
      if (v.rounds > 0) {
        e.set("median_ratio", v.median);
        e.set("interval", json::Value(json::Array{v.lo, v.hi}));
      }
      c.push(e);
    }
    j.set("confirmations", c);
  }
  if (!x.note.empty()) j.set("note", x.note);
  return j;
}

// With --repeat: the verdict counts of each run on its own. Returns how many runs had a SLOWER.
int add_runs_json(json::Value& doc, const std::vector<Bench>& benches, const AbOptions& o) {
  int runs_with_slower = 0;
  json::Value& runs = doc.set("runs", json::Value(json::Array{}));
  for (int k = 0; k < o.repeat; ++k) {
    std::map<std::string, int> c;
    json::Value slower = json::Value(json::Array{});
    for (const Bench& x : benches)
      if (x.role == Role::gated && !x.per_run.empty()) {
        c[x.per_run[k]]++;
        if (x.per_run[k] == "SLOWER") slower.push(x.name);
      }
    json::Value r;
    for (const char* v : {"SAME", "SLOWER", "FASTER", "AMBIGUOUS"}) r.set(v, c[v]);
    r.set("slower", slower);
    runs_with_slower += c["SLOWER"] > 0;
    runs.push(r);
  }
  doc.set("runs_with_slower", runs_with_slower);
  return runs_with_slower;
}

// What a finished comparison is made of, for ab.json and ab.md.
struct Outcome {
  const Side &base, &head;
  const Selection& sel;
  const json::Value& instr;
  int regressions = 0;
  int runs_with_slower = 0;
  std::map<std::string, int> count;  // gated benchmarks by verdict
};

json::Value ab_json(Outcome& out, const AbOptions& o) {
  json::Value doc;
  doc.set("schema", "opforge.ab/1");
  doc.set("base", side_json(out.base));
  doc.set("head", side_json(out.head));
  doc.set("machine", machine_facts());
  doc.set("settings", settings_json(o));
  json::Value& list = doc.set("benchmarks", json::Value(json::Array{}));
  for (const Bench& x : out.sel.benches) list.push(bench_json(x));
  json::Value nb = json::Value(json::Array{}), na = json::Value(json::Array{});
  for (const auto& n : out.sel.only_head) nb.push(n);
  for (const auto& n : out.sel.only_base) na.push(n);
  doc.set("only_in_head", nb);
  doc.set("only_in_base", na);
  json::Value same = json::Value(json::Array{});
  for (const auto& n : out.sel.identical) same.push(n);
  doc.set("not_timed_identical_module", same);
  doc.set("instructions", out.instr);
  if (o.repeat > 1) out.runs_with_slower = add_runs_json(doc, out.sel.benches, o);
  doc.set("regressions", out.regressions);
  doc.set("exit_code", out.regressions ? 1 : 0);
  return doc;
}

std::string ab_markdown_summary(const Outcome& out, const AbOptions& o) {
  const Side &base = out.base, &head = out.head;
  std::string md = "# opforge ab\n\nbase `" + o.base + "` (" + base.kind +
                   (base.sha.empty() ? "" : " " + base.sha.substr(0, 12)) + ") vs head `" + o.head + "` (" + head.kind +
                   (head.sha.empty() ? "" : " " + head.sha.substr(0, 12)) + "), " + std::to_string(o.rounds) +
                   " rounds" + (o.repeat > 1 ? " x " + std::to_string(o.repeat) + " runs" : "") + ", blocks of " +
                   fmt("%g", o.block_seconds) + " s, " + std::to_string(default_num_threads()) +
                   " threads max, threshold " + fmt("%g", o.threshold * 100) +
                   " %, interval >= " + fmt("%g", (1 - o.alpha) * 100) + " %.\n\n";
  std::string counts;
  for (const auto& [k, n] : out.count) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + k;
  md += "**" + std::string(out.regressions ? "FAIL" : "PASS") + "**: " + std::to_string(out.regressions) +
        " regression(s); " + std::to_string(out.sel.gated) + " benchmarks compared (" + counts + ").";
  if (!out.sel.identical.empty())
    md += " Not timed: " + std::to_string(out.sel.identical.size()) +
          " benchmark(s) whose op's module is byte-identical in both builds (--skip-identical).";
  if (o.repeat > 1)
    md += " Runs with a SLOWER verdict: " + std::to_string(out.runs_with_slower) + " of " + std::to_string(o.repeat) +
          ".";
  return md;
}

std::string ab_markdown(const Outcome& out, const AbOptions& o) {
  std::string md = ab_markdown_summary(out, o);
  md +=
      "\n\nRatio = head time / base time per round (the two builds timed back to back, order alternating); the median "
      "and "
      "its order-statistic interval decide. Controls run the same code in both builds: a control away from 1 means the "
      "pairing itself is biased.\n\n| benchmark | verdict | median ratio | interval | base median | head median | note "
      "|\n"
      "|---|---|---:|---|---:|---:|---|\n";
  for (const char* want : {"FAILED", "SLOWER", "AMBIGUOUS", "FASTER", "NEW", "SKIPPED", "SAME"})
    for (const Bench& x : out.sel.benches)
      if (x.verdict == want) {
        const std::string v = x.role == Role::control ? "control " + x.verdict : x.verdict;
        md += "| `" + x.name + "` | " + v + " | " +
              (x.ratios.empty()
                   ? "| | | | "
                   : fmt("%.3f | [%.3f, %.3f] | ", x.v.median, x.v.lo, x.v.hi) +
                         fmt("%.4g ms | %.4g ms | ", median_of(x.base_ns) / 1e6, median_of(x.head_ns) / 1e6)) +
              x.note + " |\n";
      }
  if (!out.sel.only_head.empty() || !out.sel.only_base.empty())
    md += "\nOnly in head: " + std::to_string(out.sel.only_head.size()) +
          "; only in base: " + std::to_string(out.sel.only_base.size()) + " (not compared).\n";
  md += "\n## Instruction counts (callgrind)\n\n";
  if (out.instr.str("status") == "skip") {
    md += "skipped: " + out.instr.str("reason") + "\n";
  } else {
    md += "| case | verdict | base | head | change |\n|---|---|---:|---:|---:|\n";
    for (const auto& c : out.instr.get("counts").as_array())
      md += "| `" + c.str("name") + "` | " + c.str("verdict") + " | " + fmt("%.0f", c.num("base")) + " | " +
            fmt("%.0f", c.num("head")) + " | " + fmt("%+.2f %%", (c.num("ratio", 1) - 1) * 100) + " |\n";
  }
  return md;
}

}  // namespace

int run_ab(const AbOptions& o_in) {
  AbOptions o = o_in;
  validate_options(o);
  const std::unique_ptr<std::regex> filter = compile_filter(o);
  prepare_out_dir(o);

  Side base, head;
  base.name = "base", base.arg = o.base, base.env = o.base_env;
  head.name = "head", head.arg = o.head, head.env = o.head_env;
  for (Side* s : {&base, &head}) resolve(*s, o);
  check_ops_exist(base, head, o);
  for (Side* s : {&base, &head}) build(*s, o);

  // The first pair lists the benchmarks, then measures the first run.
  ServerPair first = start_pair(base, head, o, 1, true);
  const std::vector<std::string> base_names = first.b->list(600), head_names = first.h->list(600);
  const std::set<std::string> identical = o.skip_identical ? identical_modules(base, head) : std::set<std::string>{};
  Selection sel = select_benchmarks(base_names, head_names, o, filter.get(), identical);
  if (sel.gated == 0) {  // every selected op's module is identical: nothing to time
    sel.benches.clear();
  } else {
    measure_all(first, base, head, sel.benches, o);
  }
  first = ServerPair{};  // (if nothing was timed: measure_all takes it over otherwise)

  int instr_regressions = 0;
  const json::Value instr = compare_instructions(base, head, o, filter.get(), instr_regressions);

  Outcome out{base, head, sel, instr, instr_regressions, 0, {}};
  for (const Bench& x : sel.benches)
    if (x.role == Role::gated) {
      out.count[x.verdict]++;
      out.regressions += x.verdict == "SLOWER" || x.verdict == "FAILED";
    }
  const json::Value doc = ab_json(out, o);
  const std::string md = ab_markdown(out, o);
  files::write_atomic(o.out + "/ab.json", json::dump(doc));
  files::write_atomic(o.out + "/ab.md", md);
  std::fputs(md.c_str(), stdout);
  return out.regressions ? 1 : 0;
}

}  // namespace opf::matrix
