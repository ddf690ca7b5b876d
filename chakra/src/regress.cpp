#include "regress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include "atomic_output.h"
#include "byte_source.h"
#include "chakra_paths.h"
#include "common/temp_dir.h"
#include "converter.h"
#include "et_stream.h"
#include "input_error.h"
#include "jsonizer.h"
#include "proto/et_def.pb.h"

namespace opf::chakra {

namespace {

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

uint64_t fnv64(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string hash8(std::string_view s) {
  uint64_t h = fnv64(s);
  char b[20];
  std::snprintf(b, sizeof b, "%08x", unsigned((h >> 32) ^ h));
  return b;
}

// 16-bit per-node content hash: keeps goldens small; the whole-file hash line catches the rare
// collision, the per-node hash names the node.
std::string hash4(std::string_view s) {
  uint64_t h = fnv64(s);
  char b[8];
  std::snprintf(b, sizeof b, "%04x", unsigned((h ^ (h >> 16) ^ (h >> 32) ^ (h >> 48)) & 0xffff));
  return b;
}

std::string clean(std::string_view s) {  // keep a summary field on one line
  std::string r(s);
  for (char& c : r)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return r;
}

std::string attr_text(const ChakraProtoMsg::AttributeProto& a) {
  using A = ChakraProtoMsg::AttributeProto;
  std::string v;
  switch (a.value_case()) {
    case A::kInt64Val: v = "i64:" + std::to_string(a.int64_val()); break;
    case A::kUint64Val: v = "u64:" + std::to_string(a.uint64_val()); break;
    case A::kInt32Val: v = "i32:" + std::to_string(a.int32_val()); break;
    case A::kUint32Val: v = "u32:" + std::to_string(a.uint32_val()); break;
    case A::kBoolVal: v = std::string("bool:") + (a.bool_val() ? "1" : "0"); break;
    case A::kDoubleVal: v = "f64:" + std::to_string(a.double_val()); break;
    case A::kStringVal:
      v = a.string_val().size() > 32 ? "str#" + hash8(a.string_val()) : "str:" + clean(a.string_val());
      break;
    default: {
      std::string bytes;
      a.SerializeToString(&bytes);
      v = "other#" + hash8(bytes);
    }
  }
  return clean(a.name()) + "=" + v;
}

template <class R>
std::string join(const R& r) {
  std::string s;
  for (auto x : r) {
    if (!s.empty()) s.push_back(',');
    s += std::to_string(x);
  }
  return s;
}

std::string read_text(const std::string& path) { return read_all(path); }

struct Parsed {
  std::string hash, meta;
  std::vector<std::string> order;                          // ids in file order
  std::map<std::string, std::vector<std::string>> fields;  // id -> fields (name first)
};

Parsed parse_summary(const std::string& s) {
  Parsed p;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("H\t", 0) == 0) {
      p.hash = line.substr(2);
      continue;
    }
    if (line.rfind("M\t", 0) == 0) {
      p.meta = line.substr(2);
      continue;
    }
    if (line.rfind("N\t", 0) != 0) continue;
    std::vector<std::string> f;
    size_t start = 2;
    for (;;) {
      size_t t = line.find('\t', start);
      f.push_back(line.substr(start, t == std::string::npos ? std::string::npos : t - start));
      if (t == std::string::npos) break;
      start = t + 1;
    }
    if (f.empty()) continue;
    std::string id = f[0];
    f.erase(f.begin());
    p.order.push_back(id);
    p.fields[id] = std::move(f);
  }
  return p;
}

// field name of a summary column ("data=1,2" -> "data")
std::string field_name(const std::string& f, size_t col) {
  static const char* fixed[] = {"type", "name"};
  if (col < 2) return fixed[col];
  size_t eq = f.find('=');
  return eq == std::string::npos ? f : f.substr(0, eq);
}

std::map<std::string, std::string> keyed(const std::vector<std::string>& f) {
  std::map<std::string, std::string> m;
  std::map<std::string, int> seen;
  for (size_t i = 0; i < f.size(); ++i) {
    std::string k = field_name(f[i], i);
    if (seen[k]++) k += "#" + std::to_string(seen[k]);
    m[k] = i < 2 ? f[i] : f[i].substr(std::min(f[i].size(), f[i].find('=') + 1));
  }
  return m;
}

std::string compare_files(const std::string& got_path, const std::string& ref_path, const char* what) {
  std::string a = read_text(got_path), b = read_text(ref_path);
  if (a == b) return {};
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return std::string(what) + " differs from " + ref_path + " at byte " + std::to_string(i) + " (sizes " +
         std::to_string(a.size()) + " vs " + std::to_string(b.size()) + ")";
}

// reference log lines without the "LEVEL [date time] " prefix and without file paths
std::vector<std::string> log_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  std::string line;
  static const char* path_markers[] = {"from file: ", "trace file: ", "available at "};
  while (std::getline(in, line)) {
    size_t rb = line.find("] ");
    if (rb != std::string::npos) line = line.substr(rb + 2);
    for (const char* m : path_markers) {
      size_t p = line.find(m);
      if (p != std::string::npos) line = line.substr(0, p + std::strlen(m)) + "<path>";
    }
    out.push_back(line);
  }
  return out;
}

std::string compare_logs(const std::string& got_path, const std::string& ref_path) {
  auto a = log_lines(read_text(got_path)), b = log_lines(read_text(ref_path));
  size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i])
      return "simulation log differs from " + ref_path + " at line " + std::to_string(i + 1) + ": got '" + a[i] +
             "', reference '" + b[i] + "'";
  if (a.size() != b.size())
    return "simulation log has " + std::to_string(a.size()) + " lines, reference " + ref_path + " has " +
           std::to_string(b.size());
  return {};
}

void write_gz(const std::string& path, const std::string& text) {
  AtomicOutput out(path);
  out.write(text);
  out.commit();
}

// Golden files store the summary column-delta encoded before gzip: a field equal to the one
// above is "~", an integer suffix that differs from the one above by a small amount is "+d"
// (with the same prefix), anything starting with '~', '+' or '\\' is escaped with '\\'. Node
// lines of a trace are highly regular, so this makes the goldens ~5x smaller.
std::vector<std::string> split_tabs(const std::string& line) {
  std::vector<std::string> f;
  size_t start = 0;
  for (;;) {
    size_t t = line.find('\t', start);
    f.push_back(line.substr(start, t == std::string::npos ? std::string::npos : t - start));
    if (t == std::string::npos) return f;
    start = t + 1;
  }
}

// "data=123" -> ("data=", 123); false when there is no integer suffix
bool int_suffix(const std::string& f, std::string& prefix, long long& value) {
  size_t i = f.size();
  while (i > 0 && std::isdigit(uint8_t(f[i - 1]))) --i;
  if (i == f.size() || f.size() - i > 15) return false;
  if (i > 0 && f[i - 1] == '-') --i;
  prefix = f.substr(0, i);
  if (!prefix.empty() && std::isdigit(uint8_t(prefix.back()))) return false;
  value = std::stoll(f.substr(i));
  return std::to_string(value) == f.substr(i);
}

std::string encode_summary(const std::string& text) {
  std::string out;
  std::vector<std::string> prev;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("N\t", 0) != 0) {
      out += line + "\n";
      continue;
    }
    auto f = split_tabs(line);
    for (size_t i = 0; i < f.size(); ++i) {
      if (i) out.push_back('\t');
      std::string p1, p2;
      long long v1, v2;
      if (i == 0) {
        out += f[i];  // the "N" record tag
      } else if (i < prev.size() && f[i] == prev[i]) {
        out += "~";
      } else if (i < prev.size() && int_suffix(f[i], p1, v1) && int_suffix(prev[i], p2, v2) && p1 == p2 &&
                 v1 - v2 < 1000 && v1 - v2 > -1000) {
        out += "+" + std::to_string(v1 - v2);
      } else {
        if (!f[i].empty() && (f[i][0] == '~' || f[i][0] == '+' || f[i][0] == '\\')) out.push_back('\\');
        out += f[i];
      }
    }
    out.push_back('\n');
    prev = std::move(f);
  }
  return out;
}

std::string decode_summary(const std::string& text) {
  std::string out;
  std::vector<std::string> prev;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("N\t", 0) != 0) {
      out += line + "\n";
      continue;
    }
    auto f = split_tabs(line);
    for (size_t i = 0; i < f.size(); ++i) {
      std::string& x = f[i];
      if (x == "~" && i < prev.size()) {
        x = prev[i];
      } else if (!x.empty() && x[0] == '+' && i < prev.size()) {
        std::string p;
        long long v;
        if (int_suffix(prev[i], p, v)) x = p + std::to_string(v + std::stoll(x.substr(1)));
      } else if (!x.empty() && x[0] == '\\') {
        x = x.substr(1);
      }
      if (i) out.push_back('\t');
      out += x;
    }
    out.push_back('\n');
    prev = std::move(f);
  }
  return out;
}

}  // namespace

const std::vector<RegressCase>& regress_cases() {
  static const std::vector<RegressCase> cases = {
      // reference outputs: byte equality in --compat reference
      {"ref_c102_linked", "synthetic-linked/c102_linked.ref.json.gz", true, false,
       "synthetic-linked/c102_linked.ref.et.gz", "synthetic-linked/c102_linked.ref.et.jsonized.json.gz",
       "synthetic-linked/c102_linked.ref.convert_simulate.log.gz"},
      {"ref_c102_host_unlinked", "mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz", true, false,
       "synthetic-linked/c102_host_unlinked.ref.et.gz", "",
       "synthetic-linked/c102_host_unlinked.ref.convert_simulate.log.gz"},
      {"ref_resnet_linked", "synthetic-linked/resnet_linked.ref.json.gz", true, false,
       "synthetic-linked/resnet_linked.ref.et.gz", "", "synthetic-linked/resnet_linked.ref.convert_simulate.log.gz"},
      {"ref_resnet_host_unlinked", "facebookresearch-param/resnet_et.json.gz", true, false,
       "synthetic-linked/resnet_host_unlinked.ref.et.gz", "", ""},
      // default mode: reviewed goldens
      {"c102_linked", "synthetic-linked/c102_linked.ref.json.gz", false, false, "", "", ""},
      {"c102_host", "mlcommons-chakra/host_et_1.0.2-chakra.0.0.4.json.gz", false, false, "", "", ""},
      {"resnet_linked", "synthetic-linked/resnet_linked.ref.json.gz", false, false, "", "", ""},
      {"resnet_et", "facebookresearch-param/resnet_et.json.gz", false, false, "", "", ""},
      {"resnet_1gpu_et", "facebookresearch-param/resnet_1gpu_et.json.gz", false, false, "", "", ""},
      {"resnet_2gpu_et", "facebookresearch-param/resnet_2gpu_et.json.gz", false, false, "", "", ""},
      {"hf_GPT2_et", "facebookresearch-param/hf_GPT2_et.json.gz", false, false, "", "", ""},
      {"pt2_et", "facebookresearch-param/pt2_et.json.gz", false, false, "", "", ""},
      {"linear_et_1.0.1", "facebookresearch-param/linear_et.json.gz", false, false, "", "", ""},
      {"dlrm_eg_0_1.0.1", "facebookresearch-param/dlrm_eg_0.json.gz", false, false, "", "", ""},
      {"simple_add_et_1.0.1", "facebookresearch-hta/benchmark_simple_add_et.json.gz", false, false, "", "", ""},
      // existing .et files: read, validate, summarise
      {"feeder_tests_chakra.0", "mlcommons-chakra/feeder_tests_chakra.0.et.gz", false, true, "", "", ""},
      {"astra_all_reduce.0", "astra-sim/workload__microbenchmarks__all_reduce__4npus_1MB__all_reduce.0.et.gz", false,
       true, "", "", ""},
      {"astra_custom_allreduce.0",
       "astra-sim/system__custom_collectives__custom_ring_allreduce_8npus_1MB__custom_allreduce.0.et.gz", false, true,
       "", "", ""},
  };
  return cases;
}

std::string default_traces_dir() { return OPF_CHAKRA_TRACES_DIR; }
std::string default_golden_dir() { return std::string(OPF_CHAKRA_SOURCE_ROOT) + "/chakra/tests/golden"; }

std::string et_summary(const std::string& et_path) {
  EtReader rd(et_path, false);
  std::string s;
  {
    char b[24];
    std::snprintf(b, sizeof b, "%016llx", (unsigned long long)fnv64(read_all(et_path)));
    s += std::string("H\t") + b + "\n";
  }
  ChakraProtoMsg::GlobalMetadata gm;
  if (!rd.next(gm)) return s;
  s += "M\tversion=" + clean(gm.version());
  for (const auto& a : gm.attr()) s += "\t" + attr_text(a);
  s += "\n";
  ChakraProtoMsg::Node n;
  while (rd.next(n)) {
    s += "N\t" + std::to_string(n.id()) + "\t" + ChakraProtoMsg::NodeType_Name(n.type()) + "\t" + clean(n.name());
    s += "\tctrl=" + join(n.ctrl_deps()) + "\tdata=" + join(n.data_deps());
    s += "\tstart=" + std::to_string(n.start_time_micros()) + "\tdur=" + std::to_string(n.duration_micros());
    // inputs, outputs and op_schema (long, unique-ish text) as one small hash
    std::string io;
    for (const auto* x : {&n.inputs(), &n.outputs()})
      io += x->values() + '\x1f' + x->shapes() + '\x1f' + x->types() + '\x1e';
    io += n.has_inputs() ? "i" : "-";
    io += n.has_outputs() ? "o" : "-";
    for (const auto& a : n.attr())
      if (a.name() == "op_schema") io += a.string_val();
    s += "\tio=" + hash4(io);
    for (const auto& a : n.attr())
      if (a.name() != "op_schema") {
        s += '\t';  // not "\t" + ...: GCC 12 reports a false -Wrestrict there once et_summary is inlined
        s += attr_text(a);
      }
    s += "\n";
  }
  return s;
}

std::vector<std::string> diff_summaries(const std::string& golden, const std::string& now, size_t limit) {
  std::vector<std::string> out;
  size_t total = 0;
  auto add = [&](std::string s) {
    if (out.size() < limit) out.push_back(std::move(s));
    ++total;
  };
  Parsed g = parse_summary(golden), c = parse_summary(now);
  if (g.meta != c.meta) add("GlobalMetadata: golden '" + g.meta + "' now '" + c.meta + "'");
  for (const auto& id : g.order) {
    auto it = c.fields.find(id);
    const auto& gf = g.fields[id];
    std::string label = "node " + id + " (" + (gf.size() > 1 ? gf[1] : "") + ")";
    if (it == c.fields.end()) {
      add(label + ": missing now");
      continue;
    }
    auto gk = keyed(gf), ck = keyed(it->second);
    for (const auto& [k, v] : gk) {
      auto jt = ck.find(k);
      if (jt == ck.end()) add(label + ": field " + k + " gone (golden '" + v + "')");
      else if (jt->second != v) add(label + ": field " + k + ": golden '" + v + "' now '" + jt->second + "'");
    }
    for (const auto& [k, v] : ck)
      if (!gk.count(k)) add(label + ": new field " + k + " = '" + v + "'");
  }
  for (const auto& id : c.order)
    if (!g.fields.count(id))
      add("node " + id + " (" + (c.fields[id].size() > 1 ? c.fields[id][1] : "") + "): new node");
  if (out.empty() && g.order != c.order) add("node order changed");
  if (out.empty() && g.hash != c.hash)
    add("file content hash changed (" + g.hash + " -> " + c.hash + ") in a way the per-node summary does not show");
  if (total > out.size()) out.push_back("... and " + std::to_string(total - out.size()) + " more differences");
  return out;
}

std::vector<CaseResult> regress(const RegressOptions& opt) {
  std::vector<CaseResult> results;
  std::string work = opt.work_dir;
  files::TempDir own_work;  // removed on return, also when a case throws
  if (work.empty()) {
    if (!own_work.create("opforge-regress-"))  // under $TMPDIR, else /tmp
      throw opf::Error(std::string("regress: cannot create a temp dir (") + std::strerror(errno) + ")");
    work = own_work.path();
  }
  auto cleanup = [&](const RegressCase& c) {
    for (const char* ext : {".et", ".json", ".log"}) {
      std::string p = work + "/" + c.name + ext;
      if (!c.input_is_et || std::string(ext) != ".et") ::unlink(p.c_str());
    }
  };
  for (const auto& c : regress_cases()) {
    if (!opt.only.empty() && opt.only != c.name) continue;
    CaseResult r;
    r.name = c.name;
    std::string in = opt.traces_dir + "/" + c.input;
    if (!exists(in)) {
      r.ok = false;
      r.messages.push_back("input " + in + " not found (the corpus is part of the repository)");
      results.push_back(r);
      continue;
    }
    std::string et = work + "/" + c.name + ".et", js = work + "/" + c.name + ".json",
                log = work + "/" + c.name + ".log";
    try {
      if (c.input_is_et) {
        et = in;
      } else {
        ConvertOptions co;
        co.compat_reference = c.compat;
        co.simulate = !c.ref_log.empty();
        if (co.simulate) co.log_path = log;
        co.warn = [&](const std::string& w) { r.messages.push_back("warning: " + w); };
        convert(in, et, co);
      }
      jsonize(et, js, c.compat);
      auto check = [&](const std::string& msg) {
        if (!msg.empty()) {
          r.ok = false;
          r.messages.push_back(msg);
        }
      };
      if (!c.ref_et.empty()) check(compare_files(et, opt.traces_dir + "/" + c.ref_et, "converted .et"));
      if (!c.ref_json.empty()) check(compare_files(js, opt.traces_dir + "/" + c.ref_json, "jsonized .et"));
      if (!c.ref_log.empty()) check(compare_logs(log, opt.traces_dir + "/" + c.ref_log));
      if (!c.ref_et.empty()) {  // the reference output is the golden
        results.push_back(std::move(r));
        cleanup(c);
        continue;
      }
      std::string summary = et_summary(et);
      std::string gpath = opt.golden_dir + "/" + c.name + ".summary.gz";
      std::string golden = exists(gpath) ? decode_summary(read_all(gpath)) : std::string();
      if (opt.update) {
        if (golden != summary) {
          auto d = golden.empty() ? std::vector<std::string>{"new golden"} : diff_summaries(golden, summary, 50);
          for (auto& l : d) r.messages.push_back("updated: " + l);
          write_gz(gpath, encode_summary(summary));
          if (decode_summary(encode_summary(summary)) != summary)
            throw opf::Error("golden encoding does not round-trip");
        }
      } else if (golden.empty()) {
        r.ok = false;
        r.messages.push_back("no golden " + gpath + " (run `opforge chakra regress --update` and review it)");
      } else if (golden != summary) {
        r.ok = false;
        for (auto& l : diff_summaries(golden, summary)) r.messages.push_back(l);
      }
    } catch (const std::exception& e) {
      r.ok = false;
      r.messages.push_back(std::string("error: ") + e.what());
    }
    cleanup(c);
    results.push_back(std::move(r));
  }
  return results;
}

bool run_regress(const RegressOptions& opt, const std::function<void(const std::string&)>& print) {
  bool all = true;
  size_t passed = 0, failed = 0;
  if (!exists(opt.traces_dir)) {
    print("FAIL: trace corpus " + opt.traces_dir + " not found; no trace converted");
    return false;
  }
  for (const auto& r : regress(opt)) {
    print(std::string(r.ok ? "ok   " : "FAIL ") + r.name);
    for (const auto& m : r.messages) print("     " + m);
    if (r.ok) ++passed;
    else ++failed, all = false;
  }
  print(std::to_string(passed) + " passed, " + std::to_string(failed) + " failed");
  if (passed + failed == 0) {
    print("FAIL: no trace converted" + (opt.only.empty() ? std::string() : " (no case named '" + opt.only + "')"));
    return false;
  }
  return all;
}

}  // namespace opf::chakra
