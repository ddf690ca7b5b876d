#include "et_scale.h"

#include <simdjson.h>

#include <unordered_set>

#include "atomic_output.h"
#include "common/json_escape.h"
#include "host_et_index.h"
#include "input_error.h"
#include "py_json.h"

namespace opf::chakra {

namespace dom = simdjson::dom;

bool is_et_root_name(std::string_view n) {
  return n == "[pytorch|profiler|execution_trace|process]" || n == "[pytorch|profiler|execution_trace|thread]" ||
         n == "[pytorch|profiler|execution_graph|process]" || n == "[pytorch|profiler|execution_graph|thread]";
}

namespace {

// Which nodes are copied and how far each copy's ids move: copy k adds k * stride to ids (and
// k * rf_stride to rf_ids), so that no two copies share one; ET roots are written once.
struct ScalePlan {
  std::unordered_set<int64_t> root_ids;
  int64_t stride = 1, rf_stride = 1;
  size_t first_body = 0;  // roots before this index stay in front, the others go after the copies
};

ScalePlan plan_scaling(const HostEtIndex& h) {
  ScalePlan p;
  int64_t max_id = 0, max_rf = 0;
  for (auto& n : h.nodes) {
    max_id = std::max(max_id, n.id);
    if (n.has_rf_id) max_rf = std::max(max_rf, n.rf_id);
    if (is_et_root_name(n.name)) p.root_ids.insert(n.id);
  }
  p.stride = max_id + 1;
  p.rf_stride = max_rf + 1;
  p.first_body = h.nodes.size();
  for (size_t i = 0; i < h.nodes.size(); ++i)
    if (!p.root_ids.count(h.nodes[i].id)) {
      p.first_body = i;
      break;
    }
  return p;
}

// Writes the scaled document; node objects are re-serialized member by member (key order kept)
// with ids, parents and rf_ids shifted for copy k.
struct ScaledWriter {
  const HostEtIndex& h;
  const std::string& in_path;
  const ScalePlan& plan;
  AtomicOutput& out;
  ScaleStats& st;
  std::string buf;
  dom::parser parser;
  bool first_node = true;

  ScaledWriter(const HostEtIndex& h_, const std::string& in_path_, const ScalePlan& plan_, AtomicOutput& out_,
               ScaleStats& st_)
      : h(h_), in_path(in_path_), plan(plan_), out(out_), st(st_) {}

  // an "attrs" array with the rf_id attribute's value shifted
  void write_attrs(dom::array attrs, const HostNodeIndex& n, int64_t k) {
    buf.push_back('[');
    bool fa = true;
    for (auto a : attrs) {
      if (!fa) buf += ", ";
      fa = false;
      std::string_view an;
      if (a.is_object() && !a["name"].get(an) && an == "rf_id" && n.has_rf_id) {
        buf.push_back('{');
        bool fo = true;
        for (auto af : dom::object(a)) {
          if (!fo) buf += ", ";
          fo = false;
          opf::json::append_quoted(buf, af.key, opf::json::Escape::python_ascii);
          buf += ": ";
          if (std::string_view(af.key) == "value") buf += std::to_string(n.rf_id + k * plan.rf_stride);
          else py_json_element_compact(af.value, buf);
        }
        buf.push_back('}');
      } else {
        py_json_element_compact(a, buf);
      }
    }
    buf.push_back(']');
  }

  void write_node(const HostNodeIndex& n, int64_t k) {
    dom::element el;
    if (auto e = parser.parse(h.text.data() + n.begin, n.length, false).get(el))
      throw InputError(in_path, "node id " + std::to_string(n.id), simdjson::error_message(e));
    const bool root = plan.root_ids.count(n.id) > 0;
    const int64_t shift = root ? 0 : k * plan.stride;
    if (!first_node) buf += ",\n";
    first_node = false;
    buf += "    {";
    bool first = true;
    for (auto f : dom::object(el)) {
      if (!first) buf += ", ";
      first = false;
      opf::json::append_quoted(buf, f.key, opf::json::Escape::python_ascii);
      buf += ": ";
      const std::string_view key = f.key;
      if (key == "id") {
        buf += std::to_string(n.id + shift);
      } else if ((key == "ctrl_deps" || key == "parent") && n.parent_kind == ParentKind::integer) {
        buf += std::to_string(plan.root_ids.count(n.parent) ? n.parent : n.parent + shift);
      } else if (key == "rf_id" && n.has_rf_id && !root) {
        buf += std::to_string(n.rf_id + k * plan.rf_stride);
      } else if (key == "attrs" && f.value.is_array() && !root) {
        write_attrs(dom::array(f.value), n, k);
      } else {
        py_json_element_compact(f.value, buf);
      }
    }
    buf.push_back('}');
    ++st.output_nodes;
    if (buf.size() > (1 << 20)) {
      out.write(buf);
      buf.clear();
    }
  }

  // leading roots, `times` copies of the other nodes, then the remaining roots
  void write_nodes(int64_t times) {
    buf += "[\n";
    for (size_t i = 0; i < plan.first_body; ++i) write_node(h.nodes[i], 0);
    for (int64_t k = 0; k < times; ++k)
      for (size_t i = plan.first_body; i < h.nodes.size(); ++i)
        if (!plan.root_ids.count(h.nodes[i].id)) write_node(h.nodes[i], k);
    for (size_t i = plan.first_body; i < h.nodes.size(); ++i)
      if (plan.root_ids.count(h.nodes[i].id)) write_node(h.nodes[i], 0);
    buf += "\n  ]";
  }

  // the top-level members in input order; only "nodes" changes
  void write_document(int64_t times) {
    buf += "{";
    bool first_top = true;
    for (auto& [key, raw] : h.top_level) {
      if (!first_top) buf += ",";
      first_top = false;
      buf += "\n  ";
      opf::json::append_quoted(buf, key, opf::json::Escape::python_ascii);
      buf += ": ";
      if (key != "nodes") {
        dom::element v;
        if (auto e = parser.parse(raw.data(), raw.size(), false).get(v))
          throw InputError(in_path, key, simdjson::error_message(e));
        py_json_element_compact(v, buf);
        continue;
      }
      write_nodes(times);
    }
    buf += "\n}\n";
  }
};

}  // namespace

ScaleStats scale_host_et(const std::string& in_path, const std::string& out_path, int64_t times) {
  if (times < 1) throw InputError(in_path, "", "replication factor must be >= 1");
  HostEtIndex h = index_host_et(in_path);
  ScaleStats st;
  st.input_nodes = h.nodes.size();
  const ScalePlan plan = plan_scaling(h);
  st.root_nodes = plan.root_ids.size();

  AtomicOutput out(out_path);
  ScaledWriter w(h, in_path, plan, out, st);
  w.write_document(times);
  out.write(w.buf);
  out.commit();
  return st;
}

}  // namespace opf::chakra
