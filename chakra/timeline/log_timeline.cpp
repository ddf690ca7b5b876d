#include "log_timeline.h"

#include <cstdio>
#include <map>
#include <set>

#include "astra_log.h"
#include "atomic_output.h"
#include "chrome_trace.h"
#include "common/json_escape.h"
#include "input_error.h"
#include "py_json.h"

namespace opf::chakra {

namespace {

constexpr double kExact = 9007199254740992.0;  // 2^53: integers up to here convert exactly

[[noreturn]] void fail_at(const std::string& log, const LogEvent& e, const std::string& problem) {
  throw InputError(log + ":" + std::to_string(e.line), "", problem);
}

void check_npu(const std::string& log, const LogEvent& e, int64_t npus) {
  if (e.npu < 0 || e.npu >= npus)
    fail_at(log, e, "sys->id=" + std::to_string(e.npu) + " but --npus is " + std::to_string(npus));
}

// The reference: {"meta_user": "aras", "traceEvents": [...], "meta_cpu_count": N} from json.dump.
std::string reference_json(const std::string& log, const std::vector<LogEvent>& evs, const LogTimelineOptions& opt,
                           LogTimelineStats& st) {
  std::map<std::pair<int64_t, int64_t>, const LogEvent*> issued;  // (npu, node) -> latest issue
  std::string out = "{\"meta_user\": \"aras\", \"traceEvents\": [";
  bool first = true;
  for (const LogEvent& e : evs) {
    check_npu(log, e, opt.npus);  // trace_dict[npu_id]: KeyError
    if (!e.callback) {
      issued[{e.npu, e.node}] = &e;
      continue;
    }
    auto it = issued.find({e.npu, e.node});
    if (it == issued.end())
      fail_at(log, e,
              "callback of node " + std::to_string(e.node) + " on NPU " + std::to_string(e.npu) +
                  " without an issue (the reference fails here; the default mode reports it)");
    const LogEvent& is = *it->second;
    const int tid = timeline_tid(is.name);
    if (tid == 0) fail_at(log, e, "node type cannot be identified from the name '" + is.name + "'");
    const int64_t cycles = e.tick - is.tick;
    if (std::abs(double(is.tick)) > kExact || std::abs(double(cycles)) > kExact)
      fail_at(log, e, "tick beyond 2^53 (Python's exact division is not reproduced there)");
    // Python: (issued_cycle / npu_frequency) / 1_000 and duration / (npu_frequency * 1_000); both
    // int / int divisions are correctly rounded, as double / double is for exact operands
    const double ts = (double(is.tick) / double(opt.npu_frequency_mhz)) / 1000.0;
    const double dur = double(cycles) / double(opt.npu_frequency_mhz * 1000);
    if (!first) out += ", ";
    first = false;
    out += "{\"pid\": " + std::to_string(e.npu) + ", \"tid\": " + std::to_string(tid) + ", \"ts\": ";
    py_json_double(ts, out);
    out += ", \"dur\": ";
    py_json_double(dur, out);
    out += ", \"ph\": \"X\", \"name\": ";
    opf::json::append_quoted(out, is.name, opf::json::Escape::python_ascii);
    out += ", \"args\": {\"ms\": ";
    py_json_double(dur, out);
    out += "}}";
    issued.erase(it);
    ++st.events;
  }
  out += "], \"meta_cpu_count\": " + std::to_string(opt.npus) + "}";
  return out;
}

std::string where(const std::string& log, const LogEvent& e) {
  return log + ":" + std::to_string(e.line) + " (NPU " + std::to_string(e.npu) + ", node " + std::to_string(e.node) +
         ")";
}

std::string default_json(const std::string& log, const std::vector<LogEvent>& evs, const LogTimelineOptions& opt,
                         LogTimelineStats& st, const std::function<void(const std::string&)>& warn) {
  static const char* const kThread[] = {"other", "local memory", "remote memory", "compute", "communication"};
  ChromeTrace ct;
  std::set<int64_t> named_npu;
  std::set<std::pair<int64_t, int>> named_thread;
  std::map<std::pair<int64_t, int64_t>, const LogEvent*> issued;
  const LogEvent *first_repeat = nullptr, *first_orphan = nullptr;
  const double mhz = double(opt.npu_frequency_mhz);
  for (const LogEvent& e : evs) {
    check_npu(log, e, opt.npus);
    const auto key = std::make_pair(e.npu, e.node);
    if (!e.callback) {
      auto [it, fresh] = issued.emplace(key, &e);
      if (!fresh) {
        if (!st.repeated_issues++) first_repeat = it->second;
        it->second = &e;
      }
      continue;
    }
    auto it = issued.find(key);
    if (it == issued.end()) {
      if (!st.callbacks_without_issue++) first_orphan = &e;
      continue;
    }
    const LogEvent& is = *it->second;
    if (e.tick < is.tick)
      fail_at(log, e,
              "callback at tick " + std::to_string(e.tick) + " before its issue at tick " + std::to_string(is.tick) +
                  " (line " + std::to_string(is.line) + ")");
    int tid = timeline_tid(is.name);
    if (tid == 0) tid = 5;
    if (named_npu.insert(e.npu).second) ct.process_name(e.npu, "NPU " + std::to_string(e.npu));
    if (named_thread.insert({e.npu, tid}).second) ct.thread_name(e.npu, tid, kThread[tid % 5]);
    const std::string args = "\"node_id\": " + std::to_string(e.node) + ", \"issue_tick\": " + std::to_string(is.tick) +
                             ", \"callback_tick\": " + std::to_string(e.tick);
    ct.complete(e.npu, tid, double(is.tick) / mhz, double(e.tick - is.tick) / mhz, is.name, args);
    issued.erase(it);
    ++st.events;
  }
  st.issues_without_callback = issued.size();
  if (st.callbacks_without_issue)
    warn(std::to_string(st.callbacks_without_issue) +
         " callback(s) without an issue, left out; first: " + where(log, *first_orphan));
  if (st.repeated_issues)
    warn(std::to_string(st.repeated_issues) +
         " issue(s) repeated before their callback, the earlier one left out; first: " + where(log, *first_repeat));
  if (!issued.empty()) {
    const LogEvent* first = nullptr;
    for (const auto& [k, e] : issued)
      if (!first || e->line < first->line) first = e;
    warn(std::to_string(issued.size()) + " issue(s) without a callback, left out; first: " + where(log, *first));
  }
  return ct.take();
}

}  // namespace

LogTimelineStats log_timeline(const std::string& log, const std::string& out_path, const LogTimelineOptions& opt) {
  if (opt.npus < 1) throw InputError("--npus", "", "must be at least 1");
  if (opt.npu_frequency_mhz < 1) throw InputError("--npu-frequency", "", "must be a positive number of MHz");
  auto warn =
      opt.warn ? opt.warn : [](const std::string& w) { std::fprintf(stderr, "opforge: warning: %s\n", w.c_str()); };
  LogTimelineStats st;
  std::string json = opt.compat_reference ? reference_json(log, read_astra_log_reference(log), opt, st)
                                          : default_json(log, read_astra_log(log), opt, st, warn);
  AtomicOutput out(out_path);
  out.write(json);
  out.commit();
  return st;
}

}  // namespace opf::chakra
