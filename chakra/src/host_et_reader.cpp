// Host ET / linked JSON reader: JsonStream splits the file, simdjson on-demand parses each node
// object on its own, and only the compact HostNode facts are kept.
#include <simdjson.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <condition_variable>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <cmath>
#include <cstring>

#include "byte_source.h"
#include "host_et.h"
#include "input_error.h"
#include "json_stream.h"
#include "py_repr.h"

namespace opf::chakra {

const char* const kIntAttrNames[kIntAttrCount] = {"rf_id", "fw_parent", "seq_id", "scope", "tid", "fw_tid"};

namespace {

namespace od = simdjson::ondemand;
constexpr uint32_t kOpSchemaBit = 1u << kIntAttrCount;

// Thrown inside a node parse; turned into InputError with the node's location.
struct NodeProblem {
  std::string what;
};

[[noreturn]] void problem(std::string s) { throw NodeProblem{std::move(s)}; }

std::string sj_message(simdjson::error_code e) {
  switch (e) {
    case simdjson::UTF8_ERROR: return "invalid UTF-8 in a string (the JSON text must be UTF-8)";
    case simdjson::NUMBER_ERROR: return "malformed number";
    case simdjson::NUMBER_OUT_OF_RANGE: return "number out of range";
    case simdjson::STRING_ERROR: return "invalid string (bad escape or control character)";
    case simdjson::TAPE_ERROR: return "malformed JSON";
    case simdjson::INCORRECT_TYPE: return "value of the wrong JSON type";
    case simdjson::UNCLOSED_STRING: return "unterminated string";
    default: return simdjson::error_message(e);
  }
}

void check(simdjson::error_code e, const char* what) {
  if (e) problem(std::string(what) + ": " + sj_message(e));
}

// Integer JSON value (exact; rejects floats and integers beyond int64).
int64_t get_int(od::value v, const char* what) {
  od::json_type t{};
  check(v.type().get(t), what);
  if (t != od::json_type::number) problem(std::string(what) + " must be an integer");
  od::number_type nt;
  auto e = v.get_number_type().get(nt);
  if (e == simdjson::NUMBER_OUT_OF_RANGE || e == simdjson::NUMBER_ERROR)
    problem(std::string(what) + " is an integer beyond 64 bits: " + std::string(v.raw_json_token()));
  check(e, what);
  if (nt == od::number_type::floating_point_number)
    problem(std::string(what) + " must be an integer, got " + std::string(v.raw_json_token()));
  if (nt == od::number_type::unsigned_integer) {
    uint64_t u = 0;
    bool fits_u64 = !v.get_uint64().get(u);
    problem(std::string(what) + (fits_u64 ? " does not fit in int64: " : " is an integer beyond 64 bits: ") +
            std::string(v.raw_json_token()));
  }
  int64_t x = 0;
  check(v.get_int64().get(x), what);
  return x;
}

bool is_null(od::value v) {
  od::json_type t{};
  if (v.type().get(t)) return false;
  return t == od::json_type::null && v.is_null();
}

std::string_view get_str(od::value v, const char* what) {
  std::string_view s;
  od::json_type t{};
  check(v.type().get(t), what);
  if (t != od::json_type::string) problem(std::string(what) + " must be a string");
  check(v.get_string().get(s), what);
  return s;
}

// Per element of inputs.values: what comm_size (docs/chakra.md §3.4) needs. "direct" = value[3] * value[4];
// "list" = Σ inner[3] * inner[4] over the elements of a GenericList[Tensor...].
struct ElemSize {
  bool direct_ok = false, list_ok = false;
  __int128 direct = 0, list = 0;
};

struct TupleProbe {
  size_t n = 0;
  bool ok3 = false, ok4 = false;
  int64_t v3 = 0, v4 = 0;
  bool ok() const { return n >= 5 && ok3 && ok4; }
};

// Renders one array (repr) while noting integer items 3 and 4; with `inner` also probes the
// array's own array items (for GenericList[Tensor]).
void note_int(std::string_view txt, TupleProbe& tp) {
  if (txt.empty() || txt.size() > 19 || txt.find_first_not_of("-0123456789") != std::string_view::npos) return;
  int64_t x = std::stoll(std::string(txt));
  if (tp.n == 3) tp.ok3 = true, tp.v3 = x;
  if (tp.n == 4) tp.ok4 = true, tp.v4 = x;
}

// Renders one array (repr) while noting its integer items 3 and 4 in `tp`; with `list` also
// probes each array item the same way (for GenericList[Tensor]).
void render_probe(od::array arr, std::string& out, TupleProbe& tp, ElemSize* list) {
  out.push_back('[');
  bool first = true;
  for (auto item : arr) {
    od::value iv;
    check(item.get(iv), "inputs.values");
    if (!first) out += ", ";
    first = false;
    od::json_type t{};
    check(iv.type().get(t), "inputs.values");
    if (list && t == od::json_type::array) {
      TupleProbe inner;
      od::array a2;
      check(iv.get_array().get(a2), "inputs.values");
      render_probe(a2, out, inner, nullptr);
      if (inner.ok()) list->list += __int128(inner.v3) * inner.v4;
      else list->list_ok = false;
    } else {
      if (list) list->list_ok = false;
      size_t before = out.size();
      check(py_repr_json(iv, out), "inputs.values");
      if ((tp.n == 3 || tp.n == 4) && t == od::json_type::number)
        note_int(std::string_view(out.data() + before, out.size() - before), tp);
    }
    ++tp.n;
  }
  out.push_back(']');
}

// inputs.values: rendered as str() and probed per top-level element for tensor sizes.
void render_values(od::value v, std::string& out, std::vector<ElemSize>& sizes, bool& is_list) {
  od::json_type t{};
  check(v.type().get(t), "inputs.values");
  sizes.clear();
  if (t != od::json_type::array) {
    is_list = false;
    check(py_repr_json(v, out, true), "inputs.values");
    return;
  }
  is_list = true;
  od::array arr;
  check(v.get_array().get(arr), "inputs.values");
  out.push_back('[');
  bool first = true;
  for (auto el : arr) {
    od::value ev;
    check(el.get(ev), "inputs.values");
    if (!first) out += ", ";
    first = false;
    ElemSize es;
    od::json_type et{};
    check(ev.type().get(et), "inputs.values");
    if (et == od::json_type::array) {
      od::array a;
      check(ev.get_array().get(a), "inputs.values");
      TupleProbe tp;
      es.list_ok = true;
      render_probe(a, out, tp, &es);
      if (tp.ok()) {
        es.direct_ok = true;
        es.direct = __int128(tp.v3) * tp.v4;
      }
    } else {
      check(py_repr_json(ev, out), "inputs.values");
    }
    sizes.push_back(es);
  }
  out.push_back(']');
}

void render(od::value v, std::string& out, const char* what) {
  out.clear();
  check(py_repr_json(v, out, true), what);
}

struct NodeReader {
  const std::string& path;
  StringPool& pool;
  std::vector<HostNode>& out;
  bool flat;  // 1.0.1
  od::parser parser;
  std::string s_values, s_shapes, s_types, o_values, o_shapes, o_types;
  std::vector<ElemSize> sizes;
  std::string types_text;                        // the raw type strings, back to back
  std::vector<std::pair<size_t, size_t>> types;  // (offset, length) into types_text
  bool values_is_list = false, has_types = false;

  NodeReader(const std::string& path_, StringPool& pool_, std::vector<HostNode>& out_, bool flat_)
      : path(path_), pool(pool_), out(out_), flat(flat_) {}

  PStr keep(const std::string& s, bool intern) { return intern ? pool.intern_p(s) : pool.add_p(s); }

  void read_io(od::value v, bool input) {
    od::object obj;
    od::json_type t{};
    check(v.type().get(t), input ? "inputs" : "outputs");
    if (t != od::json_type::object) problem(std::string(input ? "inputs" : "outputs") + " must be an object");
    check(v.get_object().get(obj), "inputs");
    bool got_v = false, got_s = false, got_t = false;
    for (auto f : obj) {
      std::string_view k;
      check(f.unescaped_key().get(k), "key");
      od::value fv;
      check(f.value().get(fv), "value");
      if (k == "values") {
        got_v = true;
        if (input) {
          s_values.clear();
          render_values(fv, s_values, sizes, values_is_list);
        } else {
          render(fv, o_values, "outputs.values");
        }
      } else if (k == "shapes") {
        got_s = true;
        render(fv, input ? s_shapes : o_shapes, "shapes");
      } else if (k == "types") {
        got_t = true;
        if (input) read_types(fv);
        else render(fv, o_types, "outputs.types");
      }
    }
    if (!got_v || !got_s || !got_t)
      problem(std::string(input ? "inputs" : "outputs") + " lacks \"" +
              (!got_v   ? "values"
               : !got_s ? "shapes"
                        : "types") +
              "\"");
  }

  // inputs.types: rendered, and kept as strings for comm_size
  void read_types(od::value v) {
    s_types.clear();
    types.clear();
    types_text.clear();
    has_types = true;
    od::json_type t{};
    check(v.type().get(t), "inputs.types");
    if (t != od::json_type::array) {
      check(py_repr_json(v, s_types, true), "inputs.types");
      return;
    }
    od::array arr;
    check(v.get_array().get(arr), "inputs.types");
    s_types.push_back('[');
    bool first = true;
    for (auto el : arr) {
      od::value ev;
      check(el.get(ev), "inputs.types");
      if (!first) s_types += ", ";
      first = false;
      od::json_type et{};
      check(ev.type().get(et), "inputs.types");
      if (et == od::json_type::string) {
        std::string_view s;
        check(ev.get_string().get(s), "inputs.types");
        types.emplace_back(types_text.size(), s.size());
        types_text += s;
        py_repr_string(s, s_types);
      } else {
        types.emplace_back(types_text.size(), 0);
        check(py_repr_json(ev, s_types), "inputs.types");
      }
    }
    s_types.push_back(']');
  }

  void set_attr(HostNode& n, std::string_view name, od::value v, std::string_view* pg_override, bool* pg_set,
                bool* stream_set) {
    for (int a = 0; a < kIntAttrCount; ++a) {
      if (name == kIntAttrNames[a]) {
        n.attr[a] = get_int(v, kIntAttrNames[a]);
        n.attr_present |= 1u << a;
        return;
      }
    }
    if (name == "op_schema") {
      n.op_schema = pool.intern_p(get_str(v, "op_schema"));
      n.attr_present |= kOpSchemaBit;
    } else if (name == "pg_name" && pg_override) {
      if (is_null(v)) *pg_override = {};
      else *pg_override = pool.intern(get_str(v, "attr pg_name"));
      *pg_set = true;
    } else if (name == "stream" && stream_set) {
      if (is_null(v)) n.stream_null = true;
      else n.stream = get_int(v, "attr stream"), n.stream_null = false;
      *stream_set = true;
    }
  }

  void read_attrs(HostNode& n, od::value v, std::string_view& pg_override, bool& pg_set) {
    od::array arr;
    check(v.get_array().get(arr), "attrs must be an array");
    bool stream_set = false;
    for (auto el : arr) {
      od::object o;
      check(el.get_object().get(o), "attrs element must be an object");
      std::string_view name;
      bool has_name = false;
      // "name" precedes "value" in every ET writer; the other order takes a second pass.
      bool value_first = false;
      for (auto f : o) {
        std::string_view k;
        check(f.unescaped_key().get(k), "attrs key");
        od::value fv;
        check(f.value().get(fv), "attrs value");
        if (k == "name") {
          name = pool.intern(get_str(fv, "attr name"));
          has_name = true;
        } else if (k == "value") {
          if (!has_name) value_first = true;
          else set_attr(n, name, fv, &pg_override, &pg_set, &stream_set);
        }
      }
      if (!has_name) problem("attrs element without \"name\"");
      if (value_first) {
        check(o.reset().error(), "attrs");
        for (auto f : o) {
          std::string_view k;
          check(f.unescaped_key().get(k), "attrs key");
          if (k != "value") continue;
          od::value fv;
          check(f.value().get(fv), "attrs value");
          set_attr(n, name, fv, &pg_override, &pg_set, &stream_set);
        }
      }
    }
  }

  // the required keys seen so far, and the two places a pg_name can come from
  struct NodeKeys {
    bool got_id = false, got_name = false, got_parent = false, got_in = false, got_out = false;
    std::string_view pg_top, pg_attr;
    bool pg_attr_set = false;
  };

  // the node's location in errors; the id once it has been read
  static std::string node_where(const JsonStream::Span& sp, size_t index, bool got_id, int64_t id) {
    return "byte " + std::to_string(sp.offset) + " (nodes[" + std::to_string(index) + "]" +
           (got_id ? ", id " + std::to_string(id) : std::string()) + ")";
  }

  void read_exclusive_dur(HostNode& n, od::value v) {
    od::json_type t{};
    check(v.type().get(t), "exclusive_dur");
    if (t == od::json_type::null) return;
    double d = 0;
    if (t != od::json_type::number) problem("exclusive_dur must be a number");
    check(v.get_double().get(d), "exclusive_dur");
    if (d < 0 && std::trunc(d) != 0) n.duration_negative = true;
    if (!(d < 9.2e18)) problem("exclusive_dur is out of range: " + std::string(v.raw_json_token()));
    n.duration = int64_t(d);  // int() truncation
  }

  void read_sync_deps(HostNode& n, od::value v) {
    od::array arr;
    if (is_null(v)) return;
    check(v.get_array().get(arr), "sync_dep must be an array");
    for (auto x : arr) {
      od::value xv;
      check(x.get(xv), "sync_dep");
      n.sync_deps.push_back(get_int(xv, "sync_dep element"));
    }
  }

  // 1.0.1 keeps inputs, shapes and types in separate top-level keys, and attributes at the top level
  void read_flat_member(HostNode& n, std::string_view k, od::value v, NodeKeys& keys) {
    if (k == "inputs") {
      s_values.clear();
      render_values(v, s_values, sizes, values_is_list);
      keys.got_in = true;
    } else if (k == "input_shapes") {
      render(v, s_shapes, "input_shapes");
    } else if (k == "input_types") {
      read_types(v);
    } else if (k == "outputs") {
      render(v, o_values, "outputs");
      keys.got_out = true;
    } else if (k == "output_shapes") {
      render(v, o_shapes, "output_shapes");
    } else if (k == "output_types") {
      render(v, o_types, "output_types");
    } else {
      set_attr(n, k, v, nullptr, nullptr, nullptr);
    }
  }

  void read_member(HostNode& n, std::string_view k, od::value v, NodeKeys& keys) {
    if (k == "id") {
      n.id = get_int(v, "id");
      keys.got_id = true;
    } else if (k == "name") {
      n.name = pool.intern_p(get_str(v, "name"));
      keys.got_name = true;
    } else if (k == (flat ? "parent" : "ctrl_deps")) {
      keys.got_parent = true;
      if (is_null(v)) n.has_parent = false;
      else n.parent = get_int(v, flat ? "parent" : "ctrl_deps"), n.has_parent = true;
    } else if (!flat && k == "inputs") {
      read_io(v, true);
      keys.got_in = true;
    } else if (!flat && k == "outputs") {
      read_io(v, false);
      keys.got_out = true;
    } else if (!flat && k == "attrs") {
      read_attrs(n, v, keys.pg_attr, keys.pg_attr_set);
    } else if (k == "exclusive_dur") {
      read_exclusive_dur(n, v);
    } else if (k == "inter_thread_dep") {
      if (is_null(v)) n.has_inter_thread_dep = false;
      else n.inter_thread_dep = get_int(v, "inter_thread_dep"), n.has_inter_thread_dep = true;
    } else if (k == "sync_dep") {
      read_sync_deps(n, v);
    } else if (k == "ts") {
      // only the default mode's sync-dep ordering reads it; anything but a number is "absent"
      double t = 0;
      n.has_ts = !v.get_double().get(t) && std::isfinite(t);
      n.ts = t;
    } else if (k == "cat") {
      n.is_gpu = !is_null(v);
    } else if (k == "stream") {
      if (is_null(v)) n.stream_null = true;
      else n.stream = get_int(v, "stream"), n.stream_null = false;
    } else if (k == "pg_name") {
      keys.pg_top = is_null(v) ? std::string_view{} : pool.intern(get_str(v, "pg_name"));
    } else if (flat) {
      read_flat_member(n, k, v, keys);
    }
  }

  // comm_size (docs/chakra.md §3.4): zip(values, types), only "Tensor" types count.
  void compute_comm_size(HostNode& n) const {
    __int128 total = 0;
    bool ok = values_is_list;
    size_t m = std::min(sizes.size(), types.size());
    for (size_t i = 0; i < m && ok; ++i) {
      std::string_view ty(types_text.data() + types[i].first, types[i].second);
      if (ty.find("Tensor") == std::string_view::npos) continue;
      if (ty.rfind("GenericList[Tensor", 0) == 0) {
        if (!sizes[i].list_ok) ok = false;
        else total += sizes[i].list;
      } else {
        if (!sizes[i].direct_ok) ok = false;
        else total += sizes[i].direct;
      }
    }
    if (total > __int128(INT64_MAX) || total < __int128(INT64_MIN)) ok = false;
    n.comm_size_ok = ok;
    n.comm_size = ok ? int64_t(total) : 0;
  }

  // the rendered inputs/outputs move into the string pool, which outlives this reader
  void keep_rendered_io(HostNode& n) {
    n.in_values = keep(s_values, s_values.size() <= 16);
    n.in_shapes = keep(s_shapes, true);
    n.in_types = keep(s_types, true);
    n.out_values = keep(o_values, o_values.size() <= 16);
    n.out_shapes = keep(o_shapes, true);
    n.out_types = keep(o_types, true);
  }

  void clear_rendered_io() {
    s_values.clear();
    s_shapes.clear();
    s_types.clear();
    o_values.clear();
    o_shapes.clear();
    o_types.clear();
  }

  void parse(const JsonStream::Span& sp, size_t index) {
    HostNode n;
    n.offset = sp.offset;
    NodeKeys keys;
    has_types = false;
    values_is_list = false;
    sizes.clear();
    types.clear();
    try {
      od::document doc;
      auto e = parser.iterate(simdjson::padded_string_view(sp.data, sp.size, sp.capacity)).get(doc);
      check(e, "node");
      od::object obj;
      check(doc.get_object().get(obj), "node must be a JSON object");
      for (auto f : obj) {
        std::string_view k;
        check(f.unescaped_key().get(k), "key");
        od::value v;
        check(f.value().get(v), "value");
        read_member(n, k, v, keys);
      }
    } catch (const NodeProblem& p) {
      throw InputError(path, node_where(sp, index, keys.got_id, n.id), p.what);
    } catch (const simdjson::simdjson_error& e) {
      throw InputError(path, node_where(sp, index, keys.got_id, n.id), sj_message(e.error()));
    }
    const char* missing = !keys.got_id       ? "id"
                          : !keys.got_name   ? "name"
                          : !keys.got_parent ? (flat ? "parent" : "ctrl_deps")
                          : !keys.got_in     ? "inputs"
                          : !keys.got_out    ? "outputs"
                                             : nullptr;
    if (missing)
      throw InputError(path, node_where(sp, index, keys.got_id, n.id),
                       std::string("node lacks required key \"") + missing + "\"");
    if (n.id < 0)
      throw InputError(path, node_where(sp, index, keys.got_id, n.id), "negative node id " + std::to_string(n.id));
    n.pg_name = pool.intern_p(keys.pg_attr_set ? keys.pg_attr : keys.pg_top);
    keep_rendered_io(n);
    compute_comm_size(n);
    clear_rendered_io();
    out.push_back(std::move(n));
  }
};

const char* const kSupported004[] = {"1.0.2-chakra.0.0.4", "1.0.3-chakra.0.0.4", "1.1.0-chakra.0.0.4",
                                     "1.1.1-chakra.0.0.4"};

}  // namespace

// Node objects are parsed in batches by worker threads while the calling thread inflates and
// splits the input (the split is cheap, the parse is not). Results are joined in input order;
// the first error in input order wins.
class BatchParser {
 public:
  BatchParser(HostTrace& tr, bool flat, unsigned workers) : tr_(tr), flat_(flat) {
    for (unsigned w = 0; w < workers; ++w) {
      tr_.pools.push_back(std::make_unique<StringPool>());
      threads_.emplace_back([this, w] { work(*tr_.pools[w]); });
    }
  }
  ~BatchParser() { finish_threads(); }

  void add(const JsonStream::Span& sp, size_t index) {
    if (!cur_) {
      cur_ = std::make_unique<Batch>();
      cur_->first_index = index;
      cur_->text.reserve(kBatchBytes + (16 << 10) + simdjson::SIMDJSON_PADDING);  // no regrowth copies
    }
    Batch& b = *cur_;
    b.items.push_back({b.text.size(), sp.size, sp.offset});
    b.text.insert(b.text.end(), sp.data, sp.data + sp.size);
    if (b.text.size() >= kBatchBytes) submit();
  }

  // waits for all batches; moves the nodes into tr.nodes in input order; rethrows the first error
  void finish() {
    if (cur_) submit();
    finish_threads();
    for (auto& b : done_) {
      if (b->error) std::rethrow_exception(b->error);
      for (auto& n : b->nodes) tr_.nodes.push_back(std::move(n));
      b.reset();
    }
  }

 private:
  static constexpr size_t kBatchBytes = 1 << 18;
  struct Item {
    size_t pos, size;
    uint64_t offset;
  };
  struct Batch {
    size_t first_index = 0;
    std::vector<char> text;
    std::vector<Item> items;
    std::vector<HostNode> nodes;
    std::exception_ptr error;
  };

  void submit() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_space_.wait(lk, [&] { return queue_.size() < threads_.size() + 1; });
    done_.push_back(std::move(cur_));
    queue_.push_back(done_.back().get());
    cv_work_.notify_one();
  }

  void work(StringPool& pool) {
    std::vector<HostNode> sink;
    NodeReader reader{tr_.path, pool, sink, flat_};
    for (;;) {
      Batch* b;
      {
        std::unique_lock<std::mutex> lk(mu_);
        cv_work_.wait(lk, [&] { return !queue_.empty() || closing_; });
        if (queue_.empty()) return;
        b = queue_.front();
        queue_.pop_front();
        cv_space_.notify_one();
      }
      if (failed_.load()) continue;  // an earlier batch failed: the result is an error anyway
      b->text.resize(b->text.size() + simdjson::SIMDJSON_PADDING);
      sink.clear();
      sink.reserve(b->items.size());
      try {
        for (size_t k = 0; k < b->items.size(); ++k) {
          const Item& it = b->items[k];
          JsonStream::Span sp{b->text.data() + it.pos, it.size, b->text.size() - it.pos, it.offset};
          reader.parse(sp, b->first_index + k);
        }
      } catch (...) {
        b->error = std::current_exception();
        failed_ = true;
      }
      b->nodes.swap(sink);
      std::vector<char>().swap(b->text);
      std::vector<Item>().swap(b->items);
    }
  }

  void finish_threads() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      closing_ = true;
    }
    cv_work_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
  }

  HostTrace& tr_;
  bool flat_;
  std::vector<std::thread> threads_;
  std::unique_ptr<Batch> cur_;
  std::vector<std::unique_ptr<Batch>> done_;  // every submitted batch, input order
  std::deque<Batch*> queue_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_space_;
  bool closing_ = false;
  std::atomic<bool> failed_{false};
};

namespace {

unsigned parser_worker_count(const ReadOptions& opt) {
  unsigned workers =
      opt.parser_threads ? opt.parser_threads : std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  if (const char* t = std::getenv("OPFORGE_CHAKRA_THREADS")) workers = std::max(1, std::atoi(t));  // tuning/benchmarks
  return workers;
}

// The schema decides how nodes parse, so it must be known at the first node (offset: its byte).
EtSchema resolve_schema(const std::string& path, const EtMetadata& meta, uint64_t offset, const ReadOptions& opt) {
  const std::string& s = meta.schema;
  if (!meta.has_schema)
    throw InputError(path, "byte " + std::to_string(offset),
                     "no \"schema\" before the first node (missing schema key)");
  bool ok004 = false;
  for (auto* v : kSupported004) ok004 |= s == v;
  if (ok004) return EtSchema::chakra_0_0_4;
  if (s == "1.0.1" && !opt.compat_reference) return EtSchema::v1_0_1;
  if (s == "1.1.1-chakra.1.0.0" && !opt.compat_reference) return EtSchema::chakra_1_0_0;
  throw InputError(
      path, "\"schema\"",
      "unsupported schema version '" + s + "' (supported: 1.0.2/1.0.3/1.1.0/1.1.1-chakra.0.0.4" +
          std::string(
              opt.compat_reference
                  ? "; --compat reference also rejects 1.0.1 and 1.1.1-chakra.1.0.0 like the reference converter)"
                  : ", 1.0.1, 1.1.1-chakra.1.0.0)"));
}

// One top-level member other than "nodes": the five metadata keys are kept (with their Python
// repr for the converter's log), anything else is ignored.
void read_metadata_member(od::parser& mparser, EtMetadata& meta, const std::string& path, std::string_view key,
                          const JsonStream::Span& sp) {
  auto bad = [&](const std::string& p) {
    throw InputError(path, "byte " + std::to_string(sp.offset) + " (\"" + std::string(key) + "\")", p);
  };
  bool is_meta = key == "schema" || key == "pid" || key == "time" || key == "start_ts" || key == "finish_ts";
  if (!is_meta) return;
  // wrap so that scalars parse as array items
  std::string wrapped;
  wrapped.reserve(sp.size + 2);
  wrapped.push_back('[');
  wrapped.append(sp.data, sp.size);
  wrapped.push_back(']');
  simdjson::padded_string ps(wrapped);
  od::document doc;
  if (mparser.iterate(ps).get(doc)) bad("invalid JSON value");
  od::array arr;
  if (doc.get_array().get(arr)) bad("invalid JSON value");
  for (auto el : arr) {
    od::value v;
    if (auto e = el.get(v)) bad(sj_message(e));
    std::string repr;
    if (auto e = py_repr_json(v, repr)) bad(sj_message(e));
    if (key == "schema") {
      std::string_view s;
      if (v.get_string().get(s)) bad("schema must be a string");
      meta.schema = std::string(s);
      meta.has_schema = true;
      continue;
    }
    if (key == "time") {
      meta.time_repr = repr;
      meta.has_time = true;
      std::string_view s;
      meta.time_is_string = !v.get_string().get(s);
      if (meta.time_is_string) meta.time = std::string(s);
      continue;
    }
    uint64_t u = 0;
    bool ok = !v.get_uint64().get(u);
    if (key == "pid") meta.pid_repr = repr, meta.has_pid = true, meta.pid = u, meta.pid_ok = ok;
    if (key == "start_ts")
      meta.start_ts_repr = repr, meta.has_start_ts = true, meta.start_ts = u, meta.start_ts_ok = ok;
    if (key == "finish_ts")
      meta.finish_ts_repr = repr, meta.has_finish_ts = true, meta.finish_ts = u, meta.finish_ts_ok = ok;
  }
}

// OPFORGE_CHAKRA_PROFILE: the calling thread's share of the read, for tuning the split
void report_split_cpu_time() {
  if (!std::getenv("OPFORGE_CHAKRA_PROFILE")) return;
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  std::fprintf(stderr, "[chakra] split (main thread: inflate + split + copy) %.1f ms cpu\n",
               ts.tv_sec * 1e3 + ts.tv_nsec / 1e6);
}

}  // namespace

HostTrace read_host_et(const std::string& path, const ReadOptions& opt) {
  HostTrace tr;
  tr.path = path;
  ByteSource src(path);
  JsonStream js(src);
  od::parser mparser;
  std::unique_ptr<BatchParser> batches;
  const unsigned workers = parser_worker_count(opt);
  bool schema_checked = false;
  auto check_schema = [&](uint64_t offset) {
    if (schema_checked) return;
    schema_checked = true;
    tr.schema = resolve_schema(path, tr.meta, offset, opt);
    batches = std::make_unique<BatchParser>(tr, tr.schema == EtSchema::v1_0_1, workers);
  };
  auto on_member = [&](std::string_view key, const JsonStream::Span& sp) {
    read_metadata_member(mparser, tr.meta, path, key, sp);
  };
  bool saw_nodes = false;
  auto on_node = [&](const JsonStream::Span& sp, size_t index) {
    saw_nodes = true;
    check_schema(sp.offset);
    batches->add(sp, index);
  };
  try {
    js.run("nodes", on_member, on_node);
  } catch (...) {
    // a node error (found by a worker) earlier in the input takes precedence
    auto structural = std::current_exception();
    if (batches) batches->finish();
    std::rethrow_exception(structural);
  }
  report_split_cpu_time();
  if (batches) batches->finish();
  if (!saw_nodes && !tr.meta.has_schema)
    throw InputError(path, "byte 0", "not a PyTorch execution trace (no \"schema\" and no \"nodes\")");
  check_schema(src.bytes_out());
  return tr;
}

}  // namespace opf::chakra
