#include "kineto_trace.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <unordered_map>

#include "input_error.h"
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
        py_json_string(s.str, s.json);
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

std::string problem_of(simdjson::error_code e) {
  switch (e) {
    case simdjson::NUMBER_OUT_OF_RANGE:
    case simdjson::NUMBER_ERROR: return "number out of range or malformed (integers must fit in 64 bits)";
    case simdjson::UNCLOSED_STRING: return "truncated or malformed JSON: a string is never closed";
    case simdjson::INCOMPLETE_ARRAY_OR_OBJECT: return "truncated JSON: an object or array is not closed";
    case simdjson::TAPE_ERROR: return "truncated or malformed JSON (" + std::string(simdjson::error_message(e)) + ")";
    default: return std::string("invalid JSON: ") + simdjson::error_message(e);
  }
}

// Where a document-level failure is: structure left open means the text stops early.
std::string doc_where(simdjson::error_code e, size_t length) {
  if (e == simdjson::INCOMPLETE_ARRAY_OR_OBJECT || e == simdjson::UNCLOSED_STRING)
    return "byte " + std::to_string(length) + " (end of file)";
  return "byte 0";
}

}  // namespace

KinetoTrace read_kineto_trace(const std::string& path) {
  KinetoTrace tr;
  tr.path = path;
  PaddedInput in = read_padded(path);
  if (in.length == 0) throw InputError(path, "", "empty file (expected a Kineto JSON trace)");
  EventReader rd(path, in.data());

  od::parser parser;
  od::document doc;
  if (auto e = parser.iterate(in.data(), in.length, in.buf.size()).get(doc))
    throw InputError(path, doc_where(e, in.length), problem_of(e));
  od::object root;
  if (auto e = doc.get_object().get(root))
    throw InputError(path, doc_where(e, in.length),
                     e == simdjson::INCORRECT_TYPE ? "top level is not a JSON object" : problem_of(e));
  std::unordered_map<std::string, uint32_t> tid_index;
  bool saw_events = false;
  size_t ev = 0;
  const char* ev_at = nullptr;
  auto loc = [&]() -> const char* {
    const char* p = nullptr;
    if (doc.current_location().get(p)) return nullptr;
    return p;
  };
  auto fail_json = [&](simdjson::error_code e) {
    const char* p = loc();
    if (!saw_events) throw InputError(path, p ? "byte " + std::to_string(p - in.data()) : "", problem_of(e));
    rd.fail(ev, p ? p : ev_at, problem_of(e));
  };

  for (auto field_res : root) {
    od::field field;
    if (auto e = std::move(field_res).get(field)) fail_json(e);
    std::string_view key;
    if (auto e = field.unescaped_key().get(key)) fail_json(e);
    if (key != "traceEvents") continue;  // value skipped by the iterator
    od::array events;
    if (auto e = field.value().get_array().get(events)) {
      if (e == simdjson::INCORRECT_TYPE) throw InputError(path, "traceEvents", "is not an array");
      fail_json(e);
    }
    saw_events = true;
    for (auto ev_res : events) {
      ev_at = loc();
      od::value evv;
      if (auto e = std::move(ev_res).get(evv)) fail_json(e);
      od::object obj;
      if (auto e = evv.get_object().get(obj)) {
        if (e == simdjson::INCORRECT_TYPE) rd.fail(ev, ev_at, "event is not a JSON object");
        fail_json(e);
      }
      Scalar cat, name, ph, ts, dur, tid, ext, rf, corr, stream, pg;
      for (auto f_res : obj) {
        od::field f;
        if (auto e = std::move(f_res).get(f)) fail_json(e);
        std::string_view k;
        if (auto e = f.unescaped_key().get(k)) fail_json(e);
        Scalar* dst = nullptr;
        if (k == "cat") dst = &cat;
        else if (k == "name") dst = &name;
        else if (k == "ph") dst = &ph;
        else if (k == "ts") dst = &ts;
        else if (k == "dur") dst = &dur;
        else if (k == "tid") dst = &tid;
        if (dst) {
          if (auto e = rd.scalar(f.value(), *dst)) fail_json(e);
          continue;
        }
        if (k != "args") continue;
        od::object args;
        if (auto e = f.value().get_object().get(args)) {
          if (e == simdjson::INCORRECT_TYPE) continue;  // non-object args: ignored like absent
          fail_json(e);
        }
        for (auto a_res : args) {
          od::field a;
          if (auto e = std::move(a_res).get(a)) fail_json(e);
          std::string_view ak;
          if (auto e = a.unescaped_key().get(ak)) fail_json(e);
          Scalar* adst = nullptr;
          if (ak == "External id") adst = &ext;
          else if (ak == "Record function id") adst = &rf;
          else if (ak == "correlation") adst = &corr;
          else if (ak == "stream") adst = &stream;
          else if (ak == "Process Group Name") adst = &pg;
          if (adst)
            if (auto e = rd.scalar(a.value(), *adst)) fail_json(e);
        }
      }
      const std::string_view c = cat.is_string ? cat.str : std::string_view();
      const bool cpu_cat = c == "cpu_op" || c == "user_annotation";
      const bool rt_cat = c == "cuda_runtime" || c == "cuda_driver";
      const bool gpu_cat = c == "kernel" || c == "gpu_memcpy";
      if (c == "ac2g") ++tr.ac2g;
      if (!(cpu_cat || rt_cat || gpu_cat || c == "cuda_sync")) {
        ++ev;
        continue;
      }
      if (name.present && !name.is_string) rd.fail(ev, ev_at, "\"name\" is not a string");
      const std::string_view nm = name.str;
      bool device_wide = false;
      const bool profiler_step = cpu_cat && nm.find("ProfilerStep") != std::string_view::npos;
      const bool keep_cpu = cpu_cat && !profiler_step;
      const bool keep_launch = rt_cat && is_kernel_launch_name(nm);
      const bool keep_sync = rt_cat && !keep_launch && is_sync_call_name(nm, device_wide);
      if (!(keep_cpu || keep_launch || gpu_cat || keep_sync || profiler_step || c == "cuda_sync")) {
        ++ev;
        continue;
      }
      auto num = [&](const Scalar& s, const char* what) {
        if (!s.present) return PyNum::of_int(0);  // the reference's default
        if (!s.is_number)
          rd.fail(ev, ev_at, std::string("\"") + what + "\" of '" + std::string(nm) + "' is not a number");
        return s.num;
      };
      PyNum t = num(ts, "ts");
      PyNum d = num(dur, "dur");
      if (d.negative()) rd.fail(ev, ev_at, "negative \"dur\" (" + dur.json + ") on '" + std::string(nm) + "'");
      int64_t ext_id = kNoExternalId;
      if (ext.present && !to_int(ext, ext_id)) rd.fail(ev, ev_at, "\"External id\" " + ext.json + " is not an integer");
      int64_t corr_id = -1;
      if (corr.present && !corr.is_null && !to_int(corr, corr_id))
        rd.fail(ev, ev_at, "\"correlation\" " + corr.json + " is not an integer");
      auto tid_of = [&]() -> uint32_t {
        std::string key = tid.present ? tid.json : std::string("0");
        auto [it, fresh] = tid_index.emplace(key, uint32_t(tr.tids.size()));
        if (fresh) tr.tids.push_back(key);
        return it->second;
      };
      const uint32_t evi = uint32_t(ev);
      if (profiler_step) {
        auto end = py_add(t, d);
        if (!tr.first_profiler_step || t < tr.first_profiler_step->first) tr.first_profiler_step = {{t, end}};
      } else if (keep_cpu) {
        KinetoCpuOp op;
        op.ts = t;
        op.dur = d;
        op.event = evi;
        op.tid = tid_of();
        op.external_id = ext_id;
        if (rf.present && !rf.is_null) {
          if (!to_int(rf, op.rf_id)) rd.fail(ev, ev_at, "\"Record function id\" " + rf.json + " is not an integer");
          op.has_rf_id = true;
        }
        op.name = tr.pool.intern(nm);
        tr.cpu.push_back(op);
      } else if (keep_launch) {
        KinetoLaunch op;
        op.ts = t;
        op.event = evi;
        op.tid = tid_of();
        op.external_id = ext_id;
        op.correlation = corr_id;
        tr.launches.push_back(op);
      } else if (gpu_cat) {
        KinetoGpuOp op;
        op.ts = t;
        op.dur = d;
        op.event = evi;
        op.external_id = ext_id;
        op.correlation = corr_id;
        op.name = tr.pool.add(nm);
        op.cat = tr.pool.intern(c);
        op.ph_json = tr.pool.intern(ph.present ? std::string_view(ph.json) : std::string_view("null"));
        op.stream_json = tr.pool.intern(stream.present ? std::string_view(stream.json) : std::string_view("null"));
        if (pg.present && !pg.is_null) op.pg_name_json = tr.pool.intern(pg.json);
        tr.gpu.push_back(op);
      } else if (keep_sync) {
        KinetoSyncCall op;
        op.ts = t;
        op.dur = d;
        op.event = evi;
        op.tid = tid_of();
        op.external_id = ext_id;
        op.correlation = corr_id;
        op.device_wide = device_wide;
        tr.sync_calls.push_back(op);
      } else if (c == "cuda_sync") {
        tr.sync_records.push_back({corr_id, tr.pool.intern(stream.present ? std::string_view(stream.json) : "null")});
      }
      ++ev;
    }
  }
  if (!saw_events) throw InputError(path, "", "no \"traceEvents\" array (not a Kineto trace)");
  tr.events = ev;

  // The reference stable-sorts all events by ts; per kind that is (ts, file order).
  auto by_ts = [](const auto& a, const auto& b) {
    int c = py_cmp(a.ts, b.ts);
    return c != 0 ? c < 0 : a.event < b.event;
  };
  std::sort(tr.cpu.begin(), tr.cpu.end(), by_ts);
  std::sort(tr.launches.begin(), tr.launches.end(), by_ts);
  std::sort(tr.gpu.begin(), tr.gpu.end(), by_ts);
  std::sort(tr.sync_calls.begin(), tr.sync_calls.end(), by_ts);

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
  return tr;
}

}  // namespace opf::chakra
