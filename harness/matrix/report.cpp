#include "matrix/report.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>

#include "common/files.h"
#include "matrix/gate_input.h"
#include "matrix/json.h"
#include "matrix/mann_whitney.h"
#include "matrix/run_layout.h"
#include "matrix/svg.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace {

using svg::escape;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

struct BenchName {
  std::string kind;  // ours, peer, probe
  std::string op, impl, dtype, entry, shape;
  std::string threads;  // "1", "2", ... from a "/threads:N" component; "" when the name has none
  // The GPU a benchmark ran on ("" on the host): our rows' backend; "gpu" for a GPU peer, whose
  // name does not say which; the backend of a `probe/device_copy/<backend>`. GPU benchmarks are
  // the device-timed ones ("/manual_time").
  std::string device;
};

// `<op>/<backend>/<dtype>/<entry>/<shape>[/threads:N]`, `peer/<lib>/<op>/...[/threads:N]`,
// `probe/...[/threads:N]` (+ "/real_time", or "/manual_time" for GPU benchmarks)
BenchName parse_bench(std::string n) {
  bool device_timed = false;
  for (const char* suffix : {"/real_time", "/process_time", "/manual_time"})
    if (n.size() > std::strlen(suffix) && n.compare(n.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
      n.resize(n.size() - std::strlen(suffix));
      device_timed = std::strcmp(suffix, "/manual_time") == 0;
    }
  std::vector<std::string> p;
  size_t pos = 0;
  while (true) {
    size_t e = n.find('/', pos);
    p.push_back(n.substr(pos, e == std::string::npos ? std::string::npos : e - pos));
    if (e == std::string::npos) break;
    pos = e + 1;
  }
  std::string threads;
  if (p.size() > 1 && p.back().rfind("threads:", 0) == 0) {
    threads = p.back().substr(8);
    p.pop_back();
  }
  BenchName b;
  if (p[0] == "probe") {
    b.kind = "probe";
    b.op = n;
  } else if (p[0] == "peer" && p.size() >= 6) {
    b = {"peer", p[2], p[1], p[3], p[4], p[5], "", ""};
  } else if (p.size() >= 5) {
    b = {"ours", p[0], p[1], p[2], p[3], p[4], "", ""};
  } else {
    b.kind = "other";
    b.op = n;
  }
  b.threads = threads;
  if (b.kind == "probe" && p.size() >= 3 && p[1] == "device_copy") b.device = p[2];
  else if (device_timed && (b.kind == "ours" || b.kind == "peer")) b.device = b.kind == "ours" ? b.impl : "gpu";
  return b;
}

// Which probe a row is measured against: the host probe at its thread count, or its GPU's copy.
std::string probe_key(const BenchName& n) { return n.device.empty() ? n.threads : "device:" + n.device; }

struct Cell {
  json::Value rec;
  std::string dir;
  std::vector<BenchSamples> bench;
  std::vector<std::string> bench_not_run;  // the benchmark's own "N not run (...): reason" lines
  json::Value probe, inventory;
  std::vector<ChakraOutcome> chakra;
  std::vector<InstrCount> instr;  // callgrind.json, when the cell counted instructions
};

struct Run {
  std::string dir;
  json::Value manifest, debt;
  std::vector<Cell> cells;
  std::vector<json::Value> planned;  // cells of the plan (some may not have finished)
};

Run load(const std::string& run_dir) {
  Run r;
  r.dir = run_dir;
  if (!files::exists(run_dir + "/run.json")) throw Error(run_dir + ": not a recorded run (no run.json)");
  r.manifest = json::parse_file(run_dir + "/run.json");
  for (const auto& c : r.manifest.get("cells").as_array()) r.planned.push_back(c);
  std::string text;
  if (files::read_if_exists(run_dir + "/gpu_debt.json", text)) r.debt = json::parse(text, run_dir + "/gpu_debt.json");
  for (const auto& d : cell_dirs(run_dir)) {
    if (!files::read_if_exists(d + "/cell.json", text)) continue;
    Cell c;
    c.dir = d;
    c.rec = json::parse(text, d + "/cell.json");
    std::string name = c.rec.str("name");
    for (const auto& b : c.rec.get("bench").as_array()) {
      auto v = read_benchmark_json(d + "/" + b.as_string(), name);
      c.bench.insert(c.bench.end(), v.begin(), v.end());
      const std::string lines = json::parse_file(d + "/" + b.as_string()).get("context").str("opforge_not_run", "");
      for (size_t a = 0, e; a < lines.size(); a = e + 1) {
        e = lines.find('\n', a);
        if (e == std::string::npos) e = lines.size();
        if (e > a) c.bench_not_run.push_back(lines.substr(a, e - a));
      }
    }
    if (files::read_if_exists(d + "/probe.json", text)) c.probe = json::parse(text, d + "/probe.json");
    if (files::read_if_exists(d + "/inventory.json", text)) c.inventory = json::parse(text, d + "/inventory.json");
    if (c.rec.get("chakra").is_string()) c.chakra = read_chakra_json(d + "/" + c.rec.str("chakra"), name);
    if (c.rec.get("callgrind").is_string()) c.instr = read_callgrind_json(d + "/" + c.rec.str("callgrind"), name);
    r.cells.push_back(std::move(c));
  }
  // plan order
  std::map<std::string, int> order;
  for (size_t i = 0; i < r.planned.size(); ++i) order[r.planned[i].str("id")] = int(i);
  std::sort(r.cells.begin(), r.cells.end(),
            [&](const Cell& a, const Cell& b) { return order[a.rec.str("id")] < order[b.rec.str("id")]; });
  return r;
}

std::string dur(double s) {
  if (s < 60) return fmt("%.1f s", s);
  return fmt("%.0f", std::floor(s / 60)) + ":" + fmt("%02.0f", std::fmod(std::round(s), 60.0)) + " min";
}

// Memory bandwidth for "fraction of roofline": the suite's own probe benchmark at the same thread
// count when present (same process, same moment), else its first probe, else the harness's triad
// from the run manifest.
double probe_gbs(const Cell& c, const Run& r, const std::string& threads, std::string& source) {
  if (threads.rfind("device:", 0) == 0) {  // a GPU row: the device copy probe of its backend
    const std::string dev = threads.substr(7);
    for (const auto& b : c.bench) {
      const BenchName n = parse_bench(b.name);
      if (n.kind == "probe" && !n.device.empty() && (n.device == dev || dev == "gpu") && b.bytes_per_second > 0) {
        source = b.name + " (in the benchmark run)";
        return b.bytes_per_second / 1e9;
      }
    }
    source = "no probe/device_copy/" + dev + " in the benchmark run";
    return 0;
  }
  const BenchSamples* any = nullptr;
  for (const auto& b : c.bench) {
    const BenchName n = parse_bench(b.name);
    if (n.kind != "probe" || !n.device.empty() || b.bytes_per_second <= 0) continue;
    if (n.threads == threads) {
      source = b.name + " (in the benchmark run)";
      return b.bytes_per_second / 1e9;
    }
    if (!any) any = &b;
  }
  if (any) {
    source = any->name + " (in the benchmark run)";
    return any->bytes_per_second / 1e9;
  }
  source = "harness triad (run manifest)";
  return r.manifest.get("bandwidth").num("triad_gbs");
}

struct Section {
  std::string md, html;
};

Section header(const Run& r) {
  const auto& m = r.manifest;
  int pass = 0, fail = 0;
  for (const auto& c : r.cells) (c.rec.str("status") == "pass" ? pass : fail)++;
  int planned = int(r.planned.size());
  std::string sha = m.get("git").str("sha", "(no git)");
  std::string dirty = m.get("git").get("dirty").as_bool() ? " (dirty tree)" : "";
  std::string status = fail ? "FAIL" : pass == planned ? "PASS" : "INCOMPLETE";
  std::string facts[][2] = {
      {"status", status + ": " + std::to_string(pass) + " passed, " + std::to_string(fail) + " failed, " +
                     std::to_string(planned - pass - fail) + " not finished, of " + std::to_string(planned) + " cells"},
      {"matrix", m.get("matrix").str("file") + " (sha256 " + m.get("matrix").str("sha256").substr(0, 12) + ")"},
      {"commit", sha.substr(0, 12) + dirty},
      {"machine", m.get("machine").str("host") + ", " + m.get("machine").str("cpu_model") + ", " +
                      std::to_string(m.get("machine").get("cores").as_int()) + " cores"},
      {"toolchain", m.get("toolchain").str("cxx") + "; meson " + m.get("toolchain").str("meson") + "; " +
                        m.get("toolchain").str("nvcc")},
      {"bandwidth",
       fmt("%.1f GB/s", m.get("bandwidth").num("triad_gbs")) + " (" + m.get("bandwidth").str("method") + ")"},
      {"created", m.str("created_utc") + ", updated " + m.str("updated_utc")},
      {"GPU debt", std::to_string(r.debt.get("items").as_array().size()) +
                       " item(s) skipped for lack of a device: owed, not passed"},
  };
  Section s;
  s.md = "# opforge run `" + m.str("run") + "`\n\n| | |\n|---|---|\n";
  s.html = "<h1>opforge run <code>" + escape(m.str("run")) + "</code> <span class=\"badge " +
           (status == "PASS" ? "pass" : "fail") + "\">" + status + "</span></h1>\n<table class=\"facts\">\n";
  for (const auto& f : facts) {
    s.md += "| " + f[0] + " | " + f[1] + " |\n";
    s.html += "<tr><th>" + escape(f[0]) + "</th><td>" + escape(f[1]) + "</td></tr>\n";
  }
  s.md += "\n";
  s.html += "</table>\n";
  return s;
}

Section matrix_grid(const Run& r) {
  Section s;
  std::vector<std::string> steps;
  for (const auto& c : r.cells)
    for (const auto& st : c.rec.get("steps").as_array())
      if (std::find(steps.begin(), steps.end(), st.str("name")) == steps.end()) steps.push_back(st.str("name"));
  svg::Grid g;
  g.cols = steps;
  g.cols.push_back("cell");
  s.md = "## Matrix\n\n| cell | id | options |";
  for (const auto& st : steps) s.md += " " + st + " |";
  s.md += " cell |\n|---|---|---|";
  for (size_t i = 0; i <= steps.size(); ++i) s.md += "---|";
  s.md += "\n";
  std::string details;
  for (const auto& p : r.planned) {
    const Cell* c = nullptr;
    for (const auto& x : r.cells)
      if (x.rec.str("id") == p.str("id")) c = &x;
    std::string opts;
    for (const auto& [k, v] : p.get("options").as_object()) {
      std::string lit = v.as_string();
      lit.erase(std::remove(lit.begin(), lit.end(), '\''), lit.end());
      opts += (opts.empty() ? "" : " ") + k + "=" + lit;
    }
    g.rows.push_back(p.str("name"));
    std::vector<std::string> st_row, tx_row;
    s.md += "| " + p.str("name") + " | `" + p.str("id") + "` | " + opts + " |";
    for (const auto& st : steps) {
      std::string status = "not run", text = "—";
      double secs = 0;
      if (c)
        for (const auto& x : c->rec.get("steps").as_array())
          if (x.str("name") == st) {
            status = x.str("status");
            secs = x.num("seconds");
            text = status == "pass" || status == "fail" ? status + " " + dur(secs) : status;
            if (status != "pass" && status != "skip" && status != "blocked" && x.has("detail"))
              details += "- **" + p.str("name") + " / " + st + "**: " + status + " — " + x.str("detail") + " (`cells/" +
                         p.str("id") + "/" + x.str("log") + "`)\n";
          }
      st_row.push_back(status);
      tx_row.push_back(status == "pass" || status == "fail" ? dur(secs) : status);
      s.md += " " + text + " |";
    }
    std::string cs = c ? c->rec.str("status") : "not run";
    // a cell that passed with skipped-for-no-device work is shown as owing it, not as clean
    size_t owed = c ? c->rec.get("gpu_debt").as_array().size() : 0;
    st_row.push_back(cs == "pass" && owed ? "owed" : cs);
    tx_row.push_back(c ? cs + (owed ? " +" + std::to_string(owed) + " owed" : " " + dur(c->rec.num("seconds")))
                       : "not run");
    s.md +=
        " " +
        (c ? cs + " " + dur(c->rec.num("seconds")) + (owed ? ", " + std::to_string(owed) + " owed" : "") : "not run") +
        " |\n";
    g.status.push_back(st_row);
    g.text.push_back(tx_row);
  }
  if (!details.empty()) s.md += "\nProblems:\n\n" + details;
  s.md += "\n";
  s.html = "<h2 id=\"matrix\">Matrix: cell &times; step</h2>\n" + svg::grid(g) +
           "<p class=\"legend\"><span style=\"background:" + svg::status_color("pass") +
           "\">pass</span> <span style=\"background:" + svg::status_color("fail") +
           "\">fail</span> <span style=\"background:" + svg::status_color("skip") +
           "\">skip (not applicable)</span> <span style=\"background:" + svg::status_color("blocked") +
           "\">blocked by an earlier step</span> <span style=\"background:" + svg::status_color("timeout") +
           "\">timeout</span> <span style=\"background:" + svg::status_color("owed") +
           "\">passed, but owes GPU work</span></p>\n";
  if (!details.empty()) {
    s.html += "<h3>Problems</h3><ul>";
    // reuse the markdown bullet text
    size_t pos = 0;
    while (pos < details.size()) {
      size_t e = details.find('\n', pos);
      std::string line = details.substr(pos + 2, e - pos - 2);
      line.erase(std::remove(line.begin(), line.end(), '*'), line.end());
      line.erase(std::remove(line.begin(), line.end(), '`'), line.end());
      s.html += "<li>" + escape(line) + "</li>";
      pos = e + 1;
    }
    s.html += "</ul>\n";
  }
  // options table
  s.html += "<table><tr><th>cell</th><th>id</th><th>origin</th><th>options</th></tr>\n";
  for (const auto& p : r.planned) {
    std::string opts;
    for (const auto& [k, v] : p.get("options").as_object()) {
      std::string lit = v.as_string();
      lit.erase(std::remove(lit.begin(), lit.end(), '\''), lit.end());
      opts += (opts.empty() ? "" : " ") + k + "=" + lit;
    }
    s.html += "<tr><td>" + escape(p.str("name")) + "</td><td><code>" + escape(p.str("id")) + "</code></td><td>" +
              escape(p.str("origin")) + "</td><td><code>" + escape(opts) + "</code></td></tr>\n";
  }
  s.html += "</table>\n";
  return s;
}

Section tests(const Run& r) {
  Section s;
  s.md = "## Tests\n\n| cell | passed | failed | skipped |\n|---|---:|---:|---:|\n";
  s.html = "<h2 id=\"tests\">Tests</h2>\n<table><tr><th>cell</th><th>passed</th><th>failed</th><th>skipped</th></tr>\n";
  for (const auto& c : r.cells) {
    const auto& t = c.rec.get("tests");
    if (!t.is_object()) continue;
    auto n = [&](const char* k) { return std::to_string(t.get(k).as_int()); };
    s.md += "| " + c.rec.str("name") + " | " + n("passed") + " | " + n("failed") + " | " + n("skipped") + " |\n";
    s.html += "<tr><td>" + escape(c.rec.str("name")) + "</td><td class=\"num\">" + n("passed") +
              "</td><td class=\"num" + (t.get("failed").as_int() ? " bad" : "") + "\">" + n("failed") +
              "</td><td class=\"num\">" + n("skipped") + "</td></tr>\n";
  }
  s.md += "\n";
  s.html += "</table>\n";
  // inventory mismatches
  std::string inv_md, inv_html;
  for (const auto& c : r.cells)
    for (const auto& k : c.inventory.get("checks").as_array())
      if (k.str("status") == "fail") {
        std::string line = c.rec.str("name") + ": " + k.str("what") + " " + k.str("op") +
                           (k.str("backend").empty() ? "" : "/" + k.str("backend")) + " — " + k.str("detail");
        inv_md += "- " + line + "\n";
        inv_html += "<li>" + escape(line) + "</li>";
      }
  s.md += "### Inventory\n\n";
  s.html += "<h3>Inventory</h3>\n";
  int checks = 0;
  for (const auto& c : r.cells) checks += int(c.inventory.get("checks").as_array().size());
  if (inv_md.empty()) {
    s.md += std::to_string(checks) + " checks, no mismatch.\n\n";
    s.html += "<p>" + std::to_string(checks) +
              " checks (modules prebuilt / absent, JIT cache entries, listings, loads), no mismatch.</p>\n";
  } else {
    s.md += inv_md + "\n";
    s.html += "<ul class=\"bad\">" + inv_html + "</ul>\n";
  }
  return s;
}

using OpRows = std::vector<std::pair<BenchName, const BenchSamples*>>;

// Our benchmarks and the peers', by op (probes are the reference, not rows).
std::map<std::string, OpRows> rows_by_op(const Cell& c) {
  std::map<std::string, OpRows> by_op;
  for (const auto& b : c.bench) {
    auto n = parse_bench(b.name);
    if (n.kind == "ours" || n.kind == "peer") by_op[n.op].push_back({n, &b});
  }
  return by_op;
}

// The probe's GB/s at every thread count the rows use (a row is compared with the probe at its
// own thread count), and `refs`, the line that says where each came from.
std::map<std::string, double> probe_by_threads(const Cell& c, const Run& r, const std::map<std::string, OpRows>& by_op,
                                               std::string& refs) {
  std::set<std::string> thread_counts;
  for (const auto& [op, rows] : by_op)
    for (const auto& [n, b] : rows) thread_counts.insert(probe_key(n));
  std::map<std::string, double> probe;  // threads (or "device:<backend>") -> GB/s
  for (const std::string& t : thread_counts) {
    std::string src;
    probe[t] = probe_gbs(c, r, t, src);
    const bool dev = t.rfind("device:", 0) == 0;
    refs += (refs.empty() ? "" : "; ") +
            (t.empty() ? std::string("")
             : dev     ? t.substr(7) + ": "
                       : t + " thread(s): ") +
            fmt("%.1f GB/s", probe[t]) + " (" + src + ")";
  }
  return probe;
}

void append_not_run(Section& s, const Cell& c) {
  if (c.bench_not_run.empty()) return;  // skipped peers and backends, with the benchmark's reason
  s.md += "Not run:\n\n";
  s.html += "<p>Not run:</p><ul>";
  for (const std::string& l : c.bench_not_run) {
    s.md += "- " + l + "\n";
    s.html += "<li>" + escape(l) + "</li>";
  }
  s.md += "\n";
  s.html += "</ul>\n";
}

// One op of a cell: a table row and a bar per benchmark, cases side by side (ours, then peers).
void append_op(Section& s, const Cell& c, const std::string& op, OpRows& rows, std::map<std::string, double>& probe) {
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    auto ka = std::tie(a.first.dtype, a.first.entry, a.first.shape, a.first.threads, a.first.kind, a.first.impl);
    auto kb = std::tie(b.first.dtype, b.first.entry, b.first.shape, b.first.threads, b.first.kind, b.first.impl);
    return ka < kb;
  });
  double chart_ref = probe.rbegin()->second;  // the host probe at the most threads, if any row is host work
  for (auto it = probe.rbegin(); it != probe.rend(); ++it)
    if (it->first.rfind("device:", 0) != 0) {
      chart_ref = it->second;
      break;
    }
  svg::BarChart chart;
  chart.title = op + " (" + c.rec.str("name") + ")";
  chart.unit = "GB/s";
  chart.reference = chart_ref;
  chart.reference_label = fmt("probe %.1f GB/s", chart_ref);
  s.md += "#### " + op + "\n\n";
  s.md +=
      "| op case | threads | impl | median time | GB/s | % of probe | vs ours "
      "|\n|---|---:|---|---:|---:|---:|---:|\n";
  std::map<std::string, double> ours;  // case -> GB/s of our first backend on that side (host or GPU)
  auto case_key = [](const BenchName& n) {
    return n.dtype + " " + n.entry + " " + n.shape + " " + n.threads + (n.device.empty() ? "" : " gpu");
  };
  for (const auto& [n, b] : rows)
    if (n.kind == "ours" && !ours.count(case_key(n))) ours[case_key(n)] = b->bytes_per_second / 1e9;
  for (const auto& [n, b] : rows) {
    double gbs = b->bytes_per_second / 1e9;
    double med = stats::median(b->ns);
    const double pr = probe[probe_key(n)];
    const std::string tlabel = n.threads.empty() ? "" : " · " + n.threads + "T";
    std::string label =
        n.dtype + " " + n.entry + " " + n.shape + tlabel + " · " + (n.kind == "peer" ? "peer " : "") + n.impl;
    double base = ours[case_key(n)];
    std::string vs = base > 0 ? fmt("%.2fx", gbs / base) : "—";
    s.md += "| " + n.dtype + " " + n.entry + " " + n.shape + " | " + (n.threads.empty() ? "—" : n.threads) + " | " +
            (n.kind == "peer" ? "peer " : "") + n.impl + " | " + fmt("%.4g us", med / 1e3) + " | " + fmt("%.2f", gbs) +
            " | " + (pr > 0 ? fmt("%.0f %%", 100 * gbs / pr) : "—") + " | " + vs + " |\n";
    chart.bars.push_back({label, gbs, n.kind == "peer" ? "#f28e2b" : "#4e79a7",
                          fmt("%.2f GB/s", gbs) + (pr > 0 ? fmt(" (%.0f%% of probe)", 100 * gbs / pr) : "")});
  }
  s.md += "\n";
  s.html += svg::bar_chart(chart);
}

// Instruction counts are per kernel call on a small correctness shape (not the benchmark
// shapes), so they get their own short table rather than a column above.
void append_instruction_counts(Section& s, const Run& r) {
  for (const auto& c : r.cells) {
    if (c.instr.empty()) continue;
    s.md += "### Instruction counts, cell `" + c.rec.str("name") +
            "` (callgrind, per kernel call)\n\n| case | instructions |\n|---|---:|\n";
    s.html += "<h3>Instruction counts, cell <code>" + escape(c.rec.str("name")) +
              "</code></h3><p>callgrind, per kernel call, on the op's first correctness shape.</p>\n"
              "<table><tr><th>case</th><th>instructions</th></tr>\n";
    for (const auto& i : c.instr) {
      s.md += "| " + i.name + " | " + fmt("%.0f", i.instructions) + " |\n";
      s.html += "<tr><td>" + escape(i.name) + "</td><td class=\"num\">" + fmt("%.0f", i.instructions) + "</td></tr>\n";
    }
    s.md += "\n";
    s.html += "</table>\n";
  }
}

Section performance(const Run& r) {
  Section s;
  s.md = "## Performance\n\n";
  s.html = "<h2 id=\"performance\">Performance: ops vs peers and the bandwidth probe</h2>\n";
  bool any = false;
  for (const auto& c : r.cells) {
    std::map<std::string, OpRows> by_op = rows_by_op(c);
    if (by_op.empty()) continue;
    any = true;
    std::string refs;
    std::map<std::string, double> probe = probe_by_threads(c, r, by_op, refs);
    s.md += "### cell `" + c.rec.str("name") + "` — bandwidth reference " + refs + "\n\n";
    s.html += "<h3>cell <code>" + escape(c.rec.str("name")) + "</code></h3><p>Reference: " + escape(refs) +
              ". Bars: median over repetitions of bytes an ideal kernel moves per second; orange = peer library; "
              "% of probe at the benchmark's own thread count.</p>\n";
    append_not_run(s, c);
    for (auto& [op, rows] : by_op) append_op(s, c, op, rows, probe);
  }
  if (!any) {
    s.md += "No benchmarks in this run.\n\n";
    s.html += "<p>No benchmarks in this run.</p>\n";
  }
  append_instruction_counts(s, r);
  return s;
}

Section jit(const Run& r) {
  Section s;
  s.md =
      "## Module loads (cold, warm)\n\nCold: first load in a fresh cache (prebuilt module, or JIT compile). Warm: "
      "second load after the loader forgot it (JIT: cache hit).\n\n"
      "| cell | op/backend | status | cold path | cold | warm path | warm |\n|---|---|---|---|---:|---|---:|\n";
  s.html = "<h2 id=\"loads\">Module loads: JIT cold vs warm</h2>\n";
  svg::BarChart chart;
  chart.title = "load time per op x backend (log scale)";
  chart.unit = "seconds";
  chart.log_scale = true;
  for (const auto& c : r.cells)
    for (const auto& l : c.probe.get("loads").as_array()) {
      std::string key = l.str("op") + "/" + l.str("backend");
      if (l.str("status") != "loaded") {
        s.md +=
            "| " + c.rec.str("name") + " | " + key + " | " + l.str("status") + " | " + l.str("reason") + " | | | |\n";
        continue;
      }
      const auto& cold = l.get("cold");
      const auto& warm = l.get("warm");
      s.md += "| " + c.rec.str("name") + " | " + key + " | loaded | " + cold.str("source") + " | " +
              fmt("%.4g s", cold.num("seconds")) + " | " + warm.str("source") + " | " +
              fmt("%.3g ms", warm.num("seconds") * 1e3) + " |\n";
      chart.bars.push_back({c.rec.str("name") + " · " + key + " · cold (" + cold.str("source") + ")",
                            cold.num("seconds"), "#e15759", fmt("%.4g s", cold.num("seconds"))});
      chart.bars.push_back({c.rec.str("name") + " · " + key + " · warm (" + warm.str("source") + ")",
                            warm.num("seconds"), "#59a14f", fmt("%.3g ms", warm.num("seconds") * 1e3)});
    }
  s.md += "\n";
  s.html += chart.bars.empty() ? "<p>No load probe in this run.</p>\n" : svg::bar_chart(chart);
  return s;
}

Section chakra(const Run& r) {
  Section s;
  s.md = "## Chakra regression\n\n";
  s.html = "<h2 id=\"chakra\">Chakra conversion: times and regression status</h2>\n";
  svg::BarChart chart;
  chart.title = "conversion time per trace";
  chart.unit = "seconds";
  std::string rows;
  for (const auto& c : r.cells)
    for (const auto& t : c.chakra) {
      rows += "| " + c.rec.str("name") + " | " + t.trace + " | " + t.status + " | " +
              (t.seconds > 0 ? fmt("%.3f s", t.seconds) : "—") + " |\n";
      chart.bars.push_back({t.trace, t.seconds, t.status == "pass" ? "#59a14f" : "#e15759",
                            t.status + (t.seconds > 0 ? fmt(", %.3f s", t.seconds) : "")});
    }
  if (rows.empty()) {
    std::string why = "No Chakra regression results in this run";
    for (const auto& c : r.cells)
      for (const auto& st : c.rec.get("steps").as_array())
        if (st.str("name") == "chakra")
          why += "; " + c.rec.str("name") + ": " + st.str("status") +
                 (st.has("detail") ? " (" + st.str("detail") + ")" : "");
    s.md += why + ".\n\n";
    s.html += "<p>" + escape(why) + ".</p>\n";
    return s;
  }
  s.md += "| cell | trace | status | conversion |\n|---|---|---|---:|\n" + rows + "\n";
  bool timed = false;
  for (const auto& b : chart.bars) timed = timed || b.value > 0;
  if (timed) {
    s.html += svg::bar_chart(chart);
    return s;
  }
  // no per-trace timings reported: a status grid, and the suite's wall time from the step
  svg::Grid g;
  g.cols = {"status"};
  std::string total;
  for (const auto& c : r.cells) {
    for (const auto& t : c.chakra) {
      g.rows.push_back(c.rec.str("name") + " · " + t.trace);
      g.status.push_back({t.status});
      g.text.push_back({t.status});
    }
    for (const auto& st : c.rec.get("steps").as_array())
      if (st.str("name") == "chakra" && st.str("status") != "skip" && st.str("status") != "blocked")
        total += (total.empty() ? "" : "; ") + c.rec.str("name") + ": " + fmt("%.1f s", st.num("seconds"));
  }
  s.html +=
      "<p>The regression tool reports no per-trace conversion times; the whole suite (convert, jsonize, compare every "
      "trace) took " +
      escape(total) + ".</p>\n" + svg::grid(g);
  s.md += "No per-trace conversion times reported; whole suite: " + total + ".\n\n";
  return s;
}

Section debt(const Run& r) {
  Section s;
  const auto& items = r.debt.get("items").as_array();
  s.md = "## GPU debt\n\nSkipped for lack of a device: owed, never passed. " + std::to_string(items.size()) +
         " item(s).\n\n";
  s.html = "<h2 id=\"gpu-debt\">GPU debt <span class=\"badge owed\">" + std::to_string(items.size()) +
           " owed</span></h2>\n"
           "<p>Everything skipped for lack of a device. It is owed, never counted as passed; run these cells on a "
           "machine with the device to pay it.</p>\n";
  if (items.empty()) return s;
  // grouped: cell x reason -> count, with the test names
  std::map<std::pair<std::string, std::string>, std::vector<std::string>> groups;
  for (const auto& i : items) groups[{i.str("cell"), i.str("reason")}].push_back(i.str("test"));
  s.md += "| cell | reason | count | tests (first 4) | commit |\n|---|---|---:|---|---|\n";
  s.html += "<table><tr><th>cell</th><th>reason</th><th>count</th><th>tests</th><th>commit</th></tr>\n";
  std::string commit = r.debt.str("commit").substr(0, 12);
  for (const auto& [k, tests] : groups) {
    std::string first;
    for (size_t i = 0; i < tests.size() && i < 4; ++i) first += (i ? ", " : "") + tests[i];
    if (tests.size() > 4) first += ", ...";
    s.md += "| " + k.first + " | " + k.second + " | " + std::to_string(tests.size()) + " | " + first + " | " + commit +
            " |\n";
    std::string all;
    for (const auto& t : tests) all += escape(t) + "<br>";
    s.html += "<tr><td>" + escape(k.first) + "</td><td>" + escape(k.second) + "</td><td class=\"num\">" +
              std::to_string(tests.size()) + "</td><td><details><summary>" + escape(first) + "</summary>" + all +
              "</details></td><td><code>" + escape(commit) + "</code></td></tr>\n";
  }
  s.md += "\n";
  s.html += "</table>\n";
  return s;
}

const char* kCss = R"(
body { font-family: -apple-system, "Segoe UI", Roboto, sans-serif; margin: 24px; color: #222; max-width: 1200px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
h3 { font-size: 15px; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; }
td.num { text-align: right; } td.bad { color: #d43c3c; font-weight: bold; }
table.facts th { width: 110px; }
.badge { font-size: 13px; padding: 2px 8px; border-radius: 10px; color: #fff; vertical-align: middle; }
.badge.pass { background: #2e9d4f; } .badge.fail { background: #d43c3c; } .badge.owed { background: #e0a526; }
.legend span { color: #fff; padding: 1px 6px; border-radius: 3px; margin-right: 6px; font-size: 12px; }
ul.bad li { color: #d43c3c; }
svg { display: block; margin: 8px 0 16px 0; }
code { font-size: 12px; }
)";

}  // namespace

ReportFiles render_report(const std::string& run_dir) {
  auto r = load(run_dir);
  std::vector<Section> parts{header(r), matrix_grid(r), tests(r), performance(r), jit(r), chakra(r), debt(r)};
  ReportFiles out;
  out.html = "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>opforge run " +
             escape(r.manifest.str("run")) + "</title>\n<style>" + kCss + "</style></head><body>\n";
  for (const auto& p : parts) {
    out.markdown += p.md;
    out.html += p.html;
  }
  out.html += "<p style=\"color:#888;font-size:12px\">Generated by <code>opforge report</code> from " +
              escape(run_dir) + " (schemas: results/README.md).</p>\n</body></html>\n";
  return out;
}

std::string write_report(const std::string& run_dir, const std::string& out_dir) {
  auto f = render_report(run_dir);
  std::string dir = out_dir.empty() ? run_dir : out_dir;
  files::write_atomic(dir + "/report.md", f.markdown);
  files::write_atomic(dir + "/report.html", f.html);
  return dir + "/report.html";
}

}  // namespace opf::matrix
