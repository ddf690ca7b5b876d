#include "matrix/gate.h"

#include <fnmatch.h>

#include <toml++/toml.h>

#include <cmath>
#include <map>
#include <set>

#include "matrix/mann_whitney.h"
#include "opforge/error.h"
#include "matrix/toml_error.h"

namespace opf::matrix {

std::vector<GateOverride> read_overrides(const std::string& path) {
  toml::table doc;
  try {
    doc = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw_toml_error(path, e);
  }
  std::vector<GateOverride> out;
  auto where = [&](const toml::node& n) { return path + ":" + std::to_string(n.source().begin.line); };
  for (auto&& [k, v] : doc)
    if (k.str() != "override")
      throw Error(where(v) + ": unknown key '" + std::string(k.str()) + "' (use [[override]])");
  auto* arr = doc["override"].as_array();
  if (!arr) return out;
  for (auto& n : *arr) {
    auto* t = n.as_table();
    if (!t) throw Error(where(n) + ": [[override]] must be a table");
    GateOverride o;
    for (auto&& [k, v] : *t) {
      if (k.str() == "match") o.match = v.value<std::string>().value_or("");
      else if (k.str() == "threshold") {
        auto d = v.value<double>();
        if (!d || *d <= 0) throw Error(where(v) + ": threshold must be a positive fraction (0.10 = 10 %)");
        o.threshold = *d;
      } else if (k.str() == "ignore") o.ignore = v.value<bool>().value_or(false);
      else if (k.str() == "reason") o.reason = v.value<std::string>().value_or("");
      else throw Error(where(v) + ": unknown key '" + std::string(k.str()) + "' in [[override]]");
    }
    if (o.match.empty()) throw Error(where(n) + ": [[override]] needs match = \"<cell>/<benchmark glob>\"");
    if (o.reason.empty()) throw Error(where(n) + ": [[override]] needs a reason");
    out.push_back(o);
  }
  return out;
}

int GateReport::regressions() const {
  int n = 0;
  if (timing_gates)
    for (const auto& b : bench) n += b.verdict == "SLOWER" && !b.control;
  for (const auto* list : {&instr, &tests, &chakra})
    for (const auto& c : *list) n += c.verdict == "REGRESSION";
  return n;
}

// Baselines from before the thread pool (op contract v2) name benchmarks without a thread count;
// they ran on one thread, so "<...>/threads:1[/real_time]" today is "<...>[/real_time]" then.
std::string single_thread_legacy_name(const std::string& key) {
  const std::string one = "/threads:1";
  const size_t at = key.find(one);
  if (at == std::string::npos) return "";
  const size_t end = at + one.size();
  if (end != key.size() && key[end] != '/') return "";
  return key.substr(0, at) + key.substr(end);
}

namespace {

bool is_control(const std::string& name) { return name.rfind("probe/", 0) == 0 || name.rfind("peer/", 0) == 0; }

// "<...>/threads:N[/...]" -> "N", "" when the name carries no thread count
std::string threads_of(const std::string& name) {
  const size_t at = name.find("/threads:");
  if (at == std::string::npos) return "";
  const size_t from = at + 9;
  return name.substr(from, name.find('/', from) - from);
}

// SAME / SLOWER / FASTER / AMBIGUOUS of cur against base at `threshold` (the rules in gate.h)
std::string decide(const std::vector<double>& base, const std::vector<double>& cur, double threshold, double alpha,
                   double& ratio, double& p) {
  ratio = stats::median(cur) / stats::median(base);
  // Significance is tested against the threshold-shifted baseline: "slower than baseline x
  // (1 + threshold)", not merely "slower", so noise that happens to straddle the threshold
  // stays AMBIGUOUS instead of failing CI.
  std::vector<double> shifted = base;
  const double scale = ratio > 1 ? 1 + threshold : 1 - threshold;
  for (auto& x : shifted) x *= scale;
  p = stats::mann_whitney(shifted, cur).p;
  const bool beyond =
      ratio > 1 ? stats::median(cur) > stats::median(shifted) : stats::median(cur) < stats::median(shifted);
  if (std::fabs(ratio - 1) <= threshold) return "SAME";
  if (beyond && p < alpha) return ratio > 1 ? "SLOWER" : "FASTER";
  return "AMBIGUOUS";
}

struct Drift {
  double probe = 0;      // probe ratio cur/base (0: none)
  double probe_bps = 0;  // baseline probe bandwidth
  double peers = 0;      // median peer ratio (0: fewer than 3 peers)
  int n_peers = 0;
};

// Controls by "<cell>/<threads>"
std::map<std::string, Drift> drift_by_cell_threads(const GateInput& base,
                                                   const std::map<std::string, const BenchSamples*>& cur) {
  std::map<std::string, Drift> d;
  std::map<std::string, std::vector<double>> peer_ratios;
  for (const auto& b : base.bench) {
    if (!is_control(b.name) || b.ns.empty()) continue;
    auto it = cur.find(b.key());
    if (it == cur.end() || it->second->ns.empty()) continue;
    const double ratio = stats::median(it->second->ns) / stats::median(b.ns);
    if (!(std::isfinite(ratio) && ratio > 0)) continue;
    const std::string key = b.cell + "/" + threads_of(b.name);
    if (b.name.rfind("probe/", 0) == 0) {
      d[key].probe = ratio;
      d[key].probe_bps = b.bytes_per_second;
    } else {
      peer_ratios[key].push_back(ratio);
    }
  }
  for (auto& [key, r] : peer_ratios) {
    d[key].n_peers = int(r.size());
    if (r.size() >= 3) d[key].peers = stats::median(r);
  }
  return d;
}

// Current benchmarks by key, plus each "/threads:1" benchmark under its pre-thread-pool name when
// the current run has no such name itself (a legacy baseline still finds it). Keys compared under
// the old name go into `seen` so they are not reported NEW as well.
std::map<std::string, const BenchSamples*> index_current_benchmarks(const GateInput& cur, std::set<std::string>& seen) {
  std::map<std::string, const BenchSamples*> cur_bench;
  for (const auto& b : cur.bench) cur_bench[b.key()] = &b;
  for (const auto& b : cur.bench)
    if (std::string old = single_thread_legacy_name(b.key()); !old.empty() && !cur_bench.count(old)) {
      cur_bench[old] = &b;
      seen.insert(b.key());
    }
  return cur_bench;
}

// The first override whose glob matches (order in the file decides), or null.
const GateOverride* find_override(const GateConfig& cfg, const std::string& key) {
  for (const auto& o : cfg.overrides)
    // flags 0: `*` also spans '/', so "prebuilt/peer/*" covers every peer benchmark (names hold '/')
    if (fnmatch(o.match.c_str(), key.c_str(), 0) == 0) return &o;
  return nullptr;
}

// The verdict's baseline side, before the current run is looked at.
BenchVerdict start_verdict(const BenchSamples& b, const GateConfig& cfg, const GateOverride* ov) {
  BenchVerdict v;
  v.key = b.key();
  v.threshold = cfg.threshold;
  if (ov && ov->threshold > 0) v.threshold = ov->threshold, v.note = ov->reason;
  v.n_base = b.ns.size();
  v.base_median_ns = stats::median(b.ns);
  return v;
}

// Beyond the threshold: re-decide on drift-normalized samples (see gate.h). A change the controls
// explain is not the change's, so a verdict that moves under normalization becomes AMBIGUOUS.
void redecide_against_drift(BenchVerdict& v, const std::string& raw, const BenchSamples& b, const BenchSamples& c,
                            const std::map<std::string, Drift>& drift, const GateConfig& cfg) {
  auto d = drift.find(b.cell + "/" + threads_of(b.name));
  if (d != drift.end()) {
    const bool memory_bound =
        d->second.probe > 0 && d->second.probe_bps > 0 && b.bytes_per_second >= 0.5 * d->second.probe_bps;
    // a memory-bound benchmark follows the bandwidth probe; others their peers, else the probe
    if (d->second.peers > 0 && !memory_bound) v.decided_by = "peers", v.drift = d->second.peers;
    else if (d->second.probe > 0) v.decided_by = "probe", v.drift = d->second.probe;
  }
  if (v.decided_by == "raw") return;
  std::vector<double> normalized = b.ns;
  for (auto& x : normalized) x *= v.drift;
  double nratio, np;
  const std::string norm = decide(normalized, c.ns, v.threshold, cfg.alpha, nratio, np);
  char buf[256];
  std::snprintf(buf, sizeof buf, "raw %s x%.3f; %s moved x%.3f; normalized x%.3f: %s", raw.c_str(), v.ratio,
                v.decided_by == "probe" ? "the bandwidth probe" : "the peers (median)", v.drift, nratio, norm.c_str());
  v.note = buf;
  if (norm != raw) {
    v.verdict = norm == "SLOWER" || norm == "FASTER" ? "AMBIGUOUS" : norm;
    v.p = np;
  }
}

// Notes a reader needs next to the verdict: the override's reason, why AMBIGUOUS, what a control's move means.
void annotate_verdict(BenchVerdict& v, const GateOverride* ov) {
  if (ov && ov->ignore) {
    v.verdict = "IGNORED";
    v.note = ov->reason;
  } else if (v.verdict == "AMBIGUOUS" && v.note.empty()) {
    v.note = "beyond the threshold but not significant (need more repetitions or a quieter machine)";
  }
  if (v.control && (v.verdict == "SLOWER" || v.verdict == "FASTER"))
    v.note = "control (not our code): " + std::string(v.verdict == "SLOWER" ? "slower" : "faster") +
             " here means the machine moved";
}

// A benchmark present in both runs: the raw decision, then drift normalization and notes.
BenchVerdict compare_benchmark(BenchVerdict v, const BenchSamples& b, const BenchSamples& c,
                               const std::map<std::string, Drift>& drift, const GateConfig& cfg,
                               const GateOverride* ov) {
  v.n_cur = c.ns.size();
  v.cur_median_ns = stats::median(c.ns);
  v.control = is_control(v.key.substr(b.cell.size() + 1));
  const std::string raw = decide(b.ns, c.ns, v.threshold, cfg.alpha, v.ratio, v.p);
  v.verdict = raw;
  if (raw != "SAME" && !v.control) redecide_against_drift(v, raw, b, c, drift, cfg);
  annotate_verdict(v, ov);
  return v;
}

// Timing: every baseline benchmark (MISSING when gone), then those only the current run has (NEW).
void compare_benchmarks(const GateInput& base, const GateInput& cur, const GateConfig& cfg, GateReport& r) {
  std::set<std::string> seen;
  const std::map<std::string, const BenchSamples*> cur_bench = index_current_benchmarks(cur, seen);
  const std::map<std::string, Drift> drift = drift_by_cell_threads(base, cur_bench);
  double log_sum = 0;
  for (const auto& b : base.bench) {
    const GateOverride* ov = find_override(cfg, b.key());
    BenchVerdict v = start_verdict(b, cfg, ov);
    seen.insert(v.key);
    auto it = cur_bench.find(v.key);
    if (it == cur_bench.end()) {
      v.verdict = "MISSING";
      v.note = "not in the current run";
      r.bench.push_back(v);
      continue;
    }
    v = compare_benchmark(std::move(v), b, *it->second, drift, cfg, ov);
    if (std::isfinite(v.ratio) && v.ratio > 0) {
      log_sum += std::log(v.ratio);
      ++r.compared;
    }
    r.bench.push_back(v);
  }
  for (const auto& c : cur.bench)
    if (!seen.count(c.key())) {
      BenchVerdict v;
      v.key = c.key();
      v.verdict = "NEW";
      v.n_cur = c.ns.size();
      v.cur_median_ns = stats::median(c.ns);
      r.bench.push_back(v);
    }
  r.geomean = r.compared ? std::exp(log_sum / r.compared) : 1.0;
}

// Instruction counts are deterministic: a plain threshold, no statistics.
std::vector<SimpleChange> compare_instructions(const GateInput& base, const GateInput& cur, const GateConfig& cfg) {
  std::vector<SimpleChange> out;
  std::map<std::string, const InstrCount*> cur_instr;
  for (const auto& i : cur.instr) cur_instr[i.cell + "/" + i.name] = &i;
  for (const auto& i : base.instr) {
    std::string key = i.cell + "/" + i.name;
    auto it = cur_instr.find(key);
    if (it == cur_instr.end()) {
      out.push_back({key, "MISSING", "not in the current run"});
      continue;
    }
    const InstrCount& now = *it->second;
    double ratio = now.instructions / i.instructions;
    char d[256];
    int n = std::snprintf(d, sizeof d, "%.0f -> %.0f instructions (%+.2f %%)", i.instructions, now.instructions,
                          (ratio - 1) * 100);
    // beside a change, the system libraries' share: a count that rose while the whole call's fell
    // is work moved out of (say) glibc's memset into the kernel's own code
    if (ratio != 1 && i.library_instructions >= 0 && now.library_instructions >= 0) {
      const double all0 = i.instructions + i.library_instructions, all1 = now.instructions + now.library_instructions;
      std::snprintf(d + n, sizeof d - size_t(n), "; system libraries %.0f -> %.0f, whole call %.0f -> %.0f (%+.2f %%)",
                    i.library_instructions, now.library_instructions, all0, all1, (all1 / all0 - 1) * 100);
    }
    out.push_back({key,
                   ratio > 1 + cfg.instr_threshold   ? "REGRESSION"
                   : ratio < 1 - cfg.instr_threshold ? "FEWER"
                                                     : "SAME",
                   d});
  }
  return out;
}

// Correctness: a test that passed before and fails now, or a new test that fails.
std::vector<SimpleChange> compare_tests(const GateInput& base, const GateInput& cur) {
  std::vector<SimpleChange> out;
  std::map<std::string, std::string> cur_tests;
  for (const auto& t : cur.tests) cur_tests[t.cell + "/" + t.key] = t.result;
  for (const auto& t : base.tests) {
    std::string key = t.cell + "/" + t.key;
    auto it = cur_tests.find(key);
    if (it == cur_tests.end()) {
      if (t.result == "pass") out.push_back({key, "MISSING", "passed in the baseline, not run now"});
      continue;
    }
    if (t.result == "pass" && it->second == "fail")
      out.push_back({key, "REGRESSION", "passed in the baseline, fails now"});
    else if (t.result == "fail" && it->second == "pass")
      out.push_back({key, "FIXED", "failed in the baseline, passes now"});
    else if (t.result == "pass" && it->second == "skip")
      out.push_back({key, "NEWLY-SKIPPED", "passed in the baseline, skipped now"});
  }
  for (const auto& t : cur.tests)
    if (t.result == "fail") {
      bool known = false;
      for (const auto& b : base.tests) known = known || (b.cell == t.cell && b.key == t.key);
      if (!known) out.push_back({t.cell + "/" + t.key, "REGRESSION", "new test, fails"});
    }
  return out;
}

// Chakra: a trace that regressed or whose golden digest changed, or a new trace that does not pass.
std::vector<SimpleChange> compare_chakra(const GateInput& base, const GateInput& cur) {
  std::vector<SimpleChange> out;
  std::map<std::string, const ChakraOutcome*> cur_ch;
  for (const auto& c : cur.chakra) cur_ch[c.cell + "/" + c.trace] = &c;
  for (const auto& b : base.chakra) {
    std::string key = b.cell + "/" + b.trace;
    auto it = cur_ch.find(key);
    if (it == cur_ch.end()) {
      out.push_back({key, "MISSING", "not in the current run"});
      continue;
    }
    const auto& c = *it->second;
    if (b.status == "pass" && c.status != "pass")
      out.push_back({key, "REGRESSION", "status " + b.status + " -> " + c.status});
    else if (!b.golden.empty() && !c.golden.empty() && b.golden != c.golden)
      out.push_back(
          {key, "REGRESSION", "golden digest changed " + b.golden.substr(0, 12) + " -> " + c.golden.substr(0, 12)});
  }
  for (const auto& c : cur.chakra)
    if (c.status != "pass") {
      bool known = false;
      for (const auto& b : base.chakra) known = known || (b.cell == c.cell && b.trace == c.trace);
      if (!known) out.push_back({c.cell + "/" + c.trace, "REGRESSION", "new trace, status " + c.status});
    }
  return out;
}

}  // namespace

GateReport run_gate(const GateInput& base, const GateInput& cur, const GateConfig& cfg) {
  GateReport r;
  r.timing_gates = cfg.timing_gates;
  compare_benchmarks(base, cur, cfg, r);
  r.instr = compare_instructions(base, cur, cfg);
  r.tests = compare_tests(base, cur);
  r.chakra = compare_chakra(base, cur);
  return r;
}

std::string gate_markdown(const GateReport& r, const std::string& base_name, const std::string& cur_name) {
  std::map<std::string, int> count;
  for (const auto& b : r.bench) count[b.verdict]++;
  std::string s = "# opforge gate\n\nbaseline `" + base_name + "` vs current `" + cur_name + "`\n\n";
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "**%s**: %d regression(s). Benchmarks: %d compared, geomean time ratio %.3f (%+.1f %%); ",
                r.regressions() ? "FAIL" : "PASS", r.regressions(), r.compared, r.geomean, (r.geomean - 1) * 100);
  s += buf;
  std::string counts;
  for (const auto& [k, n] : count) counts += (counts.empty() ? "" : ", ") + std::to_string(n) + " " + k;
  s += (counts.empty() ? "none" : counts) + ".\n\n";
  if (!r.timing_gates && count["SLOWER"])
    s += "Timing is advisory here (--timing advisory): the " + std::to_string(count["SLOWER"]) +
         " SLOWER benchmark(s) are reported, not failed.\n\n";
  if (!r.bench.empty()) {
    s += "| benchmark | verdict | base median | current median | ratio | p vs threshold (Mann-Whitney) | reps | "
         "threshold | decided by | note |\n";
    s += "|---|---|---:|---:|---:|---:|---:|---:|---|---|\n";
    // regressions first
    std::vector<const BenchVerdict*> order;
    for (const char* v : {"SLOWER", "AMBIGUOUS", "MISSING", "FASTER", "NEW", "IGNORED", "SAME"})
      for (const auto& b : r.bench)
        if (b.verdict == v) order.push_back(&b);
    for (const auto* b : order) {
      std::snprintf(buf, sizeof buf,
                    "| `%s` | %s%s | %.4g ns | %.4g ns | %.3f | %.4f | %zu/%zu | %.0f %% | %s | %s |\n", b->key.c_str(),
                    b->control ? "control " : "", b->verdict.c_str(), b->base_median_ns, b->cur_median_ns, b->ratio,
                    b->p, b->n_base, b->n_cur, b->threshold * 100, b->decided_by.c_str(), b->note.c_str());
      s += buf;
    }
    s += "\n";
  }
  auto section = [&](const char* title, const std::vector<SimpleChange>& list) {
    if (list.empty()) return;
    s += std::string("## ") + title + "\n\n| key | verdict | detail |\n|---|---|---|\n";
    for (const auto& c : list) s += "| `" + c.key + "` | " + c.verdict + " | " + c.detail + " |\n";
    s += "\n";
  };
  section("Instruction counts (callgrind)", r.instr);
  section("Correctness", r.tests);
  section("Chakra regression", r.chakra);
  return s;
}

}  // namespace opf::matrix
