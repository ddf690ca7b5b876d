#include "kineto_trace.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <unordered_map>
#include <utility>

#include "common/json_escape.h"
#include "input_error.h"
#include "json_problem.h"
#include "padded_input.h"

namespace opf::chakra {

namespace od = simdjson::ondemand;

bool is_kernel_launch_name(std::string_view n) {
  static const std::string_view kNames[] = {
      "cuLaunchKernel",        "cuLaunchKernelEx",    "cudaLaunchKernel",
      "cudaLaunchKernelExC",   "cudaMemcpy",          "cudaMemcpyAsync",
      "cudaMemcpyFromSymbol",  "cudaMemcpyToSymbol",  "cudaLaunchCooperativeKernel",
      "hipLaunchKernel",       "hipExtLaunchKernel",  "hipExtModuleLaunchKernel",
      "hipModuleLaunchKernel", "hipMemcpyWithStream", "hipMemcpyAsync"};
  for (auto k : kNames)
    if (n == k) return true;
  return false;
}

namespace {

bool is_sync_call_name(std::string_view n, bool& device_wide) {
  device_wide = n == "cudaDeviceSynchronize" || n == "hipDeviceSynchronize";
  return device_wide || n == "cudaStreamSynchronize" || n == "cudaEventSynchronize" || n == "hipStreamSynchronize" ||
         n == "hipEventSynchronize";
}

// A scalar field value kept as what the linker needs: a number (int/float kind preserved) and
// its Python-json text.
struct Scalar {
  bool present = false;
  bool is_number = false;
  bool is_null = false;
  bool is_string = false;
  PyNum num;
  std::string_view str;  // unescaped string (valid while the parser lives)
  std::string json;      // Python-json text
};

class EventReader {
 public:
  EventReader(const std::string& path, const char* base) : path_(path), base_(base) {}

  [[noreturn]] void fail(size_t event, const char* at, const std::string& problem) const {
    std::string where = "event #" + std::to_string(event);
    if (at) where += " (byte " + std::to_string(at - base_) + ")";
    throw InputError(path_, where, problem);
  }

  // Reads any JSON scalar; containers are recorded as present but not scalar.
  simdjson::error_code scalar(od::value v, Scalar& s) {
    s = Scalar{};
    s.present = true;
    od::json_type t;
    if (auto e = v.type().get(t)) return e;
    switch (t) {
      case od::json_type::number: {
        od::number n;
        if (auto e = v.get_number().get(n)) return e;
        s.is_number = true;
        switch (n.get_number_type()) {
          case od::number_type::signed_integer: s.num = PyNum::of_int(n.get_int64()); break;
          case od::number_type::unsigned_integer: return simdjson::NUMBER_OUT_OF_RANGE;  // > int64
          default: s.num = PyNum::of_double(n.get_double()); break;
        }
        py_json_num(s.num, s.json);
        return simdjson::SUCCESS;
      }
      case od::json_type::string: {
        if (auto e = v.get_string().get(s.str)) return e;
        s.is_string = true;
        opf::json::append_quoted(s.json, s.str, opf::json::Escape::python_ascii);
        return simdjson::SUCCESS;
      }
      case od::json_type::null: {
        bool is_null = false;
        if (auto e = v.is_null().get(is_null)) return e;
        s.is_null = true;
        s.json = "null";
        return simdjson::SUCCESS;
      }
      case od::json_type::boolean: {
        bool b;
        if (auto e = v.get_bool().get(b)) return e;
        s.json = b ? "true" : "false";
        return simdjson::SUCCESS;
      }
      default: return simdjson::SUCCESS;  // object/array: skipped by the iterator
    }
  }

 private:
  std::string path_;
  const char* base_;
};

// int(x) as the reference applies it to "External id": ints, floats (truncated), numeric strings.
bool to_int(const Scalar& s, int64_t& out) {
  if (s.is_number) {
    if (s.num.is_int) {
      out = s.num.i;
      return true;
    }
    double d = s.num.d;
    if (!(d > -9.2e18 && d < 9.2e18)) return false;
    out = static_cast<int64_t>(d);
    return true;
  }
  if (s.is_string) {
    auto str = s.str;
    while (!str.empty() && str.front() == ' ') str.remove_prefix(1);
    while (!str.empty() && str.back() == ' ') str.remove_suffix(1);
    auto r = std::from_chars(str.data(), str.data() + str.size(), out);
    return r.ec == std::errc() && r.ptr == str.data() + str.size();
  }
  return false;
}

// The fields of one event that the classification reads; everything else is skipped unparsed.
struct EventFields {
  Scalar cat, name, ph, ts, dur, tid, ext, rf, corr, stream, pg;
};

// What every kept event carries, checked as the reference converts it.
struct EventValues {
  std::string_view cat, name;
  PyNum ts, dur;
  int64_t external_id = kNoExternalId;
  int64_t correlation = -1;
  uint32_t event = 0;
};

// One read of a trace: the position for error messages and the interned tids, shared by its steps.
struct TraceReader {
  TraceReader(const std::string& p, const PaddedInput& i, KinetoTrace& t, EventReader r)
      : path(p), in(i), tr(t), rd(std::move(r)) {}

  const std::string& path;
  const PaddedInput& in;
  KinetoTrace& tr;
  EventReader rd;
  od::document doc;
  std::unordered_map<std::string, uint32_t> tid_index;
  bool saw_events = false;
  size_t ev = 0;
  const char* ev_at = nullptr;

  const char* loc() {
    const char* p = nullptr;
    if (doc.current_location().get(p)) return nullptr;
    return p;
  }

  // Before "traceEvents" a failure is placed by byte only; inside it, by event.
  [[noreturn]] void fail_json(simdjson::error_code e) {
    const char* p = loc();
    if (!saw_events) throw InputError(path, p ? "byte " + std::to_string(p - in.data()) : "", json_problem(e));
    rd.fail(ev, p ? p : ev_at, json_problem(e));
  }

  od::object open_root(od::parser& parser);
  void read_args(od::field& f, EventFields& fs);
  void read_fields(od::object& obj, EventFields& fs);
  void read_events(od::array& events);
  void keep_event(const EventFields& fs);
  EventValues checked_values(const EventFields& fs, std::string_view c, std::string_view nm) const;
  uint32_t intern_tid(const Scalar& tid);
};

od::object TraceReader::open_root(od::parser& parser) {
  if (auto e = parser.iterate(in.data(), in.length, in.buf.size()).get(doc))
    throw InputError(path, json_doc_where(e, in.length), json_problem(e));
  od::object root;
  if (auto e = doc.get_object().get(root))
    throw InputError(path, json_doc_where(e, in.length),
                     e == simdjson::INCORRECT_TYPE ? "top level is not a JSON object" : json_problem(e));
  return root;
}

void TraceReader::read_args(od::field& f, EventFields& fs) {
  od::object args;
  if (auto e = f.value().get_object().get(args)) {
    if (e == simdjson::INCORRECT_TYPE) return;  // non-object args: ignored like absent
    fail_json(e);
  }
  for (auto a_res : args) {
    od::field a;
    if (auto e = std::move(a_res).get(a)) fail_json(e);
    std::string_view ak;
    if (auto e = a.unescaped_key().get(ak)) fail_json(e);
    Scalar* adst = nullptr;
    if (ak == "External id") adst = &fs.ext;
    else if (ak == "Record function id") adst = &fs.rf;
    else if (ak == "correlation") adst = &fs.corr;
    else if (ak == "stream") adst = &fs.stream;
    else if (ak == "Process Group Name") adst = &fs.pg;
    if (adst)
      if (auto e = rd.scalar(a.value(), *adst)) fail_json(e);
  }
}

void TraceReader::read_fields(od::object& obj, EventFields& fs) {
  for (auto f_res : obj) {
    od::field f;
    if (auto e = std::move(f_res).get(f)) fail_json(e);
    std::string_view k;
    if (auto e = f.unescaped_key().get(k)) fail_json(e);
    Scalar* dst = nullptr;
    if (k == "cat") dst = &fs.cat;
    else if (k == "name") dst = &fs.name;
    else if (k == "ph") dst = &fs.ph;
    else if (k == "ts") dst = &fs.ts;
    else if (k == "dur") dst = &fs.dur;
    else if (k == "tid") dst = &fs.tid;
    if (dst) {
      if (auto e = rd.scalar(f.value(), *dst)) fail_json(e);
      continue;
    }
    if (k == "args") read_args(f, fs);
  }
}

void TraceReader::read_events(od::array& events) {
  for (auto ev_res : events) {
    ev_at = loc();
    od::value evv;
    // NOLINTNEXTLINE(performance-move-const-arg): simdjson_result::get() is &&-qualified
    if (auto e = std::move(ev_res).get(evv)) fail_json(e);
    od::object obj;
    if (auto e = evv.get_object().get(obj)) {
      if (e == simdjson::INCORRECT_TYPE) rd.fail(ev, ev_at, "event is not a JSON object");
      fail_json(e);
    }
    EventFields fs;
    read_fields(obj, fs);
    keep_event(fs);
    ++ev;
  }
}

EventValues TraceReader::checked_values(const EventFields& fs, std::string_view c, std::string_view nm) const {
  auto num = [&](const Scalar& s, const char* what) {
    if (!s.present) return PyNum::of_int(0);  // the reference's default
    if (!s.is_number) rd.fail(ev, ev_at, std::string("\"") + what + "\" of '" + std::string(nm) + "' is not a number");
    return s.num;
  };
  EventValues v;
  v.cat = c;
  v.name = nm;
  v.ts = num(fs.ts, "ts");
  v.dur = num(fs.dur, "dur");
  if (v.dur.negative()) rd.fail(ev, ev_at, "negative \"dur\" (" + fs.dur.json + ") on '" + std::string(nm) + "'");
  if (fs.ext.present && !to_int(fs.ext, v.external_id))
    rd.fail(ev, ev_at, "\"External id\" " + fs.ext.json + " is not an integer");
  if (fs.corr.present && !fs.corr.is_null && !to_int(fs.corr, v.correlation))
    rd.fail(ev, ev_at, "\"correlation\" " + fs.corr.json + " is not an integer");
  v.event = uint32_t(ev);
  return v;
}

uint32_t TraceReader::intern_tid(const Scalar& tid) {
  std::string key = tid.present ? tid.json : std::string("0");
  auto [it, fresh] = tid_index.emplace(key, uint32_t(tr.tids.size()));
  if (fresh) tr.tids.push_back(key);
  return it->second;
}

KinetoCpuOp cpu_op_of(const EventValues& v, uint32_t tid) {
  KinetoCpuOp op;
  op.ts = v.ts;
  op.dur = v.dur;
  op.event = v.event;
  op.tid = tid;
  op.external_id = v.external_id;
  return op;
}

KinetoLaunch launch_of(const EventValues& v, uint32_t tid) {
  KinetoLaunch op;
  op.ts = v.ts;
  op.event = v.event;
  op.tid = tid;
  op.external_id = v.external_id;
  op.correlation = v.correlation;
  return op;
}

KinetoGpuOp gpu_op_of(const EventValues& v, const EventFields& fs, StringPool& pool) {
  KinetoGpuOp op;
  op.ts = v.ts;
  op.dur = v.dur;
  op.event = v.event;
  op.external_id = v.external_id;
  op.correlation = v.correlation;
  op.name = pool.add(v.name);
  op.cat = pool.intern(v.cat);
  op.ph_json = pool.intern(fs.ph.present ? std::string_view(fs.ph.json) : std::string_view("null"));
  op.stream_json = pool.intern(fs.stream.present ? std::string_view(fs.stream.json) : std::string_view("null"));
  if (fs.pg.present && !fs.pg.is_null) op.pg_name_json = pool.intern(fs.pg.json);
  return op;
}

KinetoSyncCall sync_call_of(const EventValues& v, uint32_t tid, bool device_wide) {
  KinetoSyncCall op;
  op.ts = v.ts;
  op.dur = v.dur;
  op.event = v.event;
  op.tid = tid;
  op.external_id = v.external_id;
  op.correlation = v.correlation;
  op.device_wide = device_wide;
  return op;
}

// Classifies the event as the reference does and keeps it if the linker uses its kind.
void TraceReader::keep_event(const EventFields& fs) {
  const std::string_view c = fs.cat.is_string ? fs.cat.str : std::string_view();
  const bool cpu_cat = c == "cpu_op" || c == "user_annotation";
  const bool rt_cat = c == "cuda_runtime" || c == "cuda_driver";
  const bool gpu_cat = c == "kernel" || c == "gpu_memcpy";
  if (c == "ac2g") ++tr.ac2g;
  if (!(cpu_cat || rt_cat || gpu_cat || c == "cuda_sync")) return;
  if (fs.name.present && !fs.name.is_string) rd.fail(ev, ev_at, "\"name\" is not a string");
  const std::string_view nm = fs.name.str;
  bool device_wide = false;
  const bool profiler_step = cpu_cat && nm.find("ProfilerStep") != std::string_view::npos;
  const bool keep_cpu = cpu_cat && !profiler_step;
  const bool keep_launch = rt_cat && is_kernel_launch_name(nm);
  const bool keep_sync = rt_cat && !keep_launch && is_sync_call_name(nm, device_wide);
  if (!(keep_cpu || keep_launch || gpu_cat || keep_sync || profiler_step || c == "cuda_sync")) return;
  const EventValues v = checked_values(fs, c, nm);
  if (profiler_step) {
    auto end = py_add(v.ts, v.dur);
    if (!tr.first_profiler_step || v.ts < tr.first_profiler_step->first) tr.first_profiler_step = {{v.ts, end}};
  } else if (keep_cpu) {
    KinetoCpuOp op = cpu_op_of(v, intern_tid(fs.tid));
    if (fs.rf.present && !fs.rf.is_null) {
      if (!to_int(fs.rf, op.rf_id)) rd.fail(ev, ev_at, "\"Record function id\" " + fs.rf.json + " is not an integer");
      op.has_rf_id = true;
    }
    op.name = tr.pool.intern(nm);
    tr.cpu.push_back(op);
  } else if (keep_launch) {
    tr.launches.push_back(launch_of(v, intern_tid(fs.tid)));
  } else if (gpu_cat) {
    tr.gpu.push_back(gpu_op_of(v, fs, tr.pool));
  } else if (keep_sync) {
    tr.sync_calls.push_back(sync_call_of(v, intern_tid(fs.tid), device_wide));
  } else if (c == "cuda_sync") {
    tr.sync_records.push_back(
        {v.correlation, tr.pool.intern(fs.stream.present ? std::string_view(fs.stream.json) : "null")});
  }
}

// The reference stable-sorts all events by ts; per kind that is (ts, file order).
void sort_events_by_ts(KinetoTrace& tr) {
  auto by_ts = [](const auto& a, const auto& b) {
    int c = py_cmp(a.ts, b.ts);
    return c != 0 ? c < 0 : a.event < b.event;
  };
  std::sort(tr.cpu.begin(), tr.cpu.end(), by_ts);
  std::sort(tr.launches.begin(), tr.launches.end(), by_ts);
  std::sort(tr.gpu.begin(), tr.gpu.end(), by_ts);
  std::sort(tr.sync_calls.begin(), tr.sync_calls.end(), by_ts);
}

// GPU ops find their launch by correlation id, so it must name one launch.
void check_unique_launch_correlations(const KinetoTrace& tr, const std::string& path) {
  std::unordered_map<int64_t, uint32_t> seen;
  seen.reserve(tr.launches.size() * 2);
  for (auto& l : tr.launches) {
    auto [it, fresh] = seen.emplace(l.correlation, l.event);
    if (!fresh)
      throw InputError(path, "event #" + std::to_string(l.event),
                       "duplicate correlation id " + std::to_string(l.correlation) +
                           " on a kernel-launch event (also on event #" + std::to_string(it->second) +
                           "); each launch must have its own correlation id");
  }
}

}  // namespace

KinetoTrace read_kineto_trace(const std::string& path) {
  KinetoTrace tr;
  tr.path = path;
  PaddedInput in = read_padded(path);
  if (in.length == 0) throw InputError(path, "", "empty file (expected a Kineto JSON trace)");
  od::parser parser;
  TraceReader reader{path, in, tr, EventReader(path, in.data())};
  od::object root = reader.open_root(parser);
  for (auto field_res : root) {
    od::field field;
    if (auto e = std::move(field_res).get(field)) reader.fail_json(e);
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) reader.fail_json(e);
    if (key != "traceEvents") continue;  // value skipped by the iterator
    od::array events;
    if (auto e = field.value().get_array().get(events)) {
      if (e == simdjson::INCORRECT_TYPE) throw InputError(path, "traceEvents", "is not an array");
      reader.fail_json(e);
    }
    reader.saw_events = true;
    reader.read_events(events);
  }
  if (!reader.saw_events) throw InputError(path, "", "no \"traceEvents\" array (not a Kineto trace)");
  tr.events = reader.ev;
  sort_events_by_ts(tr);
  check_unique_launch_correlations(tr, path);
  return tr;
}

}  // namespace opf::chakra
