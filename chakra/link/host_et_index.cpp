#include "host_et_index.h"

#include <simdjson.h>

#include <unordered_map>

#include "input_error.h"
#include "json_problem.h"

namespace opf::chakra {

namespace od = simdjson::ondemand;
namespace dom = simdjson::dom;

namespace {

// Raw text of any value (simdjson 3.0 has raw_json() on objects and arrays only).
simdjson::error_code raw_value(od::value v, std::string_view& raw) {
  od::json_type t;
  if (auto e = v.type().get(t)) return e;
  if (t == od::json_type::object) {
    od::object o;
    if (auto e = v.get_object().get(o)) return e;
    return o.raw_json().get(raw);
  }
  if (t == od::json_type::array) {
    od::array a;
    if (auto e = v.get_array().get(a)) return e;
    return a.raw_json().get(raw);
  }
  raw = v.raw_json_token();
  while (!raw.empty() && (raw.back() == ' ' || raw.back() == '\n' || raw.back() == '\r' || raw.back() == '\t'))
    raw.remove_suffix(1);
  return simdjson::SUCCESS;
}

bool get_int(dom::element v, int64_t& out) {
  if (v.is_int64()) {
    out = int64_t(v);
    return true;
  }
  return false;
}

// The "tid" and "rf_id" of the nested schemas sit among the node's "attrs".
void read_node_attrs(dom::element attrs, HostNodeIndex& n) {
  for (auto a : dom::array(attrs)) {
    std::string_view an;
    if (!a.is_object() || a["name"].get(an)) continue;
    dom::element av;
    if (an == "rf_id") {
      if (!a["value"].get(av) && get_int(av, n.rf_id)) n.has_rf_id = true;
    } else if (an == "tid") {
      if (!a["value"].get(av)) get_int(av, n.tid);
    }
  }
}

// The index fields of one node; throws on a bad "id". Returns whether the node has an "id".
bool read_node_fields(dom::object obj, HostNodeIndex& n, StringPool& pool, const std::string& path,
                      const std::string& loc) {
  bool has_id = false, has_ctrl = false;
  for (auto fld : obj) {
    const std::string_view fk = fld.key;
    dom::element v = fld.value;
    if (fk == "id") {
      if (!get_int(v, n.id)) throw InputError(path, loc, "\"id\" is not a 64-bit integer");
      has_id = true;
    } else if (fk == "ctrl_deps" || (fk == "parent" && !has_ctrl)) {
      if (fk == "ctrl_deps") has_ctrl = true;
      n.flat_schema = fk == "parent";
      if (v.is_null()) n.parent_kind = ParentKind::null;
      else if (get_int(v, n.parent)) n.parent_kind = ParentKind::integer;
      else n.parent_kind = ParentKind::other;
    } else if (fk == "name") {
      if (v.is_string()) n.name = pool.intern(std::string_view(v));
    } else if (fk == "rf_id") {
      if (get_int(v, n.rf_id)) n.has_rf_id = true;
    } else if (fk == "tid") {
      get_int(v, n.tid);
    } else if (fk == "attrs" && v.is_array()) {
      read_node_attrs(v, n);
    }
  }
  return has_id;
}

// One index read: the document (for error positions) and what its steps share.
struct HostIndexer {
  HostIndexer(const std::string& p, HostEtIndex& hi, const char* b) : path(p), h(hi), base(b) {}

  const std::string& path;
  HostEtIndex& h;
  const char* base;
  od::document doc;
  dom::parser node_parser;
  std::unordered_map<int64_t, uint32_t> ids;

  std::string where() {
    const char* p = nullptr;
    if (doc.current_location().get(p)) return "";
    return "byte " + std::to_string(p - base);
  }

  od::object open_root(od::parser& parser);
  void keep_top_level_value(od::field& f, std::string_view key);
  void index_nodes(od::array& arr);
  HostNodeIndex index_node(od::value nv, size_t k, const std::string& at);
};

od::object HostIndexer::open_root(od::parser& parser) {
  if (auto e = parser.iterate(base, h.text.length, h.text.buf.size()).get(doc))
    throw InputError(path, json_doc_where(e, h.text.length), json_problem(e));
  od::object root;
  if (auto e = doc.get_object().get(root))
    throw InputError(path, json_doc_where(e, h.text.length),
                     e == simdjson::INCORRECT_TYPE ? "top level is not a JSON object" : json_problem(e));
  return root;
}

// Other top-level values are kept as raw text, re-serialised when the output is written.
void HostIndexer::keep_top_level_value(od::field& f, std::string_view key) {
  std::string_view raw;
  if (auto e = raw_value(f.value(), raw)) throw InputError(path, where(), json_problem(e));
  if (key == "schema") {
    auto r = node_parser.parse(raw.data(), raw.size(), false);
    std::string_view s;
    if (!r.error() && r.value().is_string()) s = std::string_view(r.value());
    h.schema = std::string(s);
  }
  h.top_level.emplace_back(std::string(key), raw);
}

// Node k (`at`: where its value starts): its byte range in the text and its index fields (read by the DOM parser, which
// takes fields in any order).
HostNodeIndex HostIndexer::index_node(od::value nv, size_t k, const std::string& at) {
  std::string_view raw;
  od::object nobj;
  if (auto e = nv.get_object().get(nobj)) {
    if (e == simdjson::INCORRECT_TYPE)
      throw InputError(path, "node #" + std::to_string(k) + " " + at, "node is not a JSON object");
    throw InputError(path, "node #" + std::to_string(k) + " " + at, json_problem(e));
  }
  if (auto e = nobj.raw_json().get(raw))
    throw InputError(path, "node #" + std::to_string(k) + " " + at, json_problem(e));
  const std::string loc = "node #" + std::to_string(k) + " (byte " + std::to_string(raw.data() - base) + ")";
  dom::element el;
  if (auto e = node_parser.parse(raw.data(), raw.size(), false).get(el)) throw InputError(path, loc, json_problem(e));
  dom::object obj;
  if (el.get_object().get(obj)) throw InputError(path, loc, "node is not a JSON object");
  HostNodeIndex n;
  n.begin = uint64_t(raw.data() - base);
  if (raw.size() > UINT32_MAX) throw InputError(path, loc, "node larger than 4 GiB");
  n.length = uint32_t(raw.size());
  if (!read_node_fields(obj, n, h.pool, path, loc)) throw InputError(path, loc, "node has no \"id\"");
  auto [it, fresh] = ids.emplace(n.id, uint32_t(k));
  if (!fresh)
    throw InputError(path, loc,
                     "duplicate node id " + std::to_string(n.id) + " (also node #" + std::to_string(it->second) + ")");
  return n;
}

void HostIndexer::index_nodes(od::array& arr) {
  for (auto nr : arr) {
    const size_t k = h.nodes.size();
    std::string at = where();
    od::value nv;
    // NOLINTNEXTLINE(performance-move-const-arg): simdjson_result::get() is &&-qualified
    if (auto e = std::move(nr).get(nv))
      throw InputError(path, "node #" + std::to_string(k) + " " + at, json_problem(e));
    h.nodes.push_back(index_node(nv, k, at));
  }
}

}  // namespace

HostEtIndex index_host_et(const std::string& path) {
  HostEtIndex h;
  h.path = path;
  h.text = read_padded(path);
  if (h.text.length == 0) throw InputError(path, "", "empty file (expected a host execution trace JSON)");
  od::parser parser;
  HostIndexer ix{path, h, h.text.data()};
  od::object root = ix.open_root(parser);
  bool saw_nodes = false;
  for (auto fr : root) {
    od::field f;
    if (auto e = std::move(fr).get(f)) throw InputError(path, ix.where(), json_problem(e));
    std::string_view key;
    if (auto e = f.unescaped_key().get(key)) throw InputError(path, ix.where(), json_problem(e));
    if (key != "nodes") {
      ix.keep_top_level_value(f, key);
      continue;
    }
    od::array arr;
    if (auto e = f.value().get_array().get(arr)) {
      if (e == simdjson::INCORRECT_TYPE) throw InputError(path, "\"nodes\"", "is not an array");
      throw InputError(path, ix.where(), json_problem(e));
    }
    saw_nodes = true;
    h.top_level.emplace_back("nodes", std::string_view());
    ix.index_nodes(arr);
  }
  if (!saw_nodes) throw InputError(path, "", "no \"nodes\" array (not a host execution trace)");
  return h;
}

}  // namespace opf::chakra
