#include "visualize.h"

#include <cerrno>
#include <cstdlib>

#include "atomic_output.h"
#include "input_error.h"
#include "viz_writers.h"

namespace opf::chakra {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool parse_u64(const std::string& s, uint64_t& v) {
  if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
  errno = 0;
  v = std::strtoull(s.c_str(), nullptr, 10);
  return errno == 0;
}

}  // namespace

std::pair<uint64_t, uint64_t> parse_id_range(const std::string& text) {
  const size_t colon = text.find(':');
  uint64_t lo = 0, hi = UINT64_MAX;
  bool ok = colon != std::string::npos && (colon > 0 || colon + 1 < text.size());
  if (ok && colon > 0) ok = parse_u64(text.substr(0, colon), lo);
  if (ok && colon + 1 < text.size()) ok = parse_u64(text.substr(colon + 1), hi);
  if (!ok || lo > hi)
    throw InputError("--range", "", "'" + text + "': expected A:B (node ids, A <= B; A: and :B are open)");
  return {lo, hi};
}

VisualizeStats visualize(const std::string& in, const std::string& out, const VizSelection& sel) {
  enum { kDot, kGraphml, kHtml } format;
  if (ends_with(out, ".dot") || ends_with(out, ".gv")) format = kDot;
  else if (ends_with(out, ".graphml")) format = kGraphml;
  else if (ends_with(out, ".html") || ends_with(out, ".htm")) format = kHtml;
  else throw InputError(out, "", "unknown output format: the name must end in .dot, .gv, .graphml, .html or .htm");
  if (sel.range && sel.around) throw InputError("--range", "", "give --range or --around, not both");

  VizGraph g = load_viz_graph(in, sel);
  if (format == kHtml && g.nodes.size() > kHtmlMaxNodes)
    throw InputError(in, "",
                     std::to_string(g.nodes.size()) + " nodes selected; the HTML view takes up to " +
                         std::to_string(kHtmlMaxNodes) +
                         ": cut the graph with --range A:B or --around ID --depth K, "
                         "or write .dot/.graphml");
  std::string text = format == kDot ? viz::to_dot(g) : format == kGraphml ? viz::to_graphml(g) : viz::to_html(g);
  AtomicOutput o(out);
  o.write(text);
  o.commit();
  VisualizeStats st;
  st.nodes = g.nodes.size();
  st.missing_deps = g.missing_deps;
  st.duplicate_ids = g.duplicate_ids;
  st.cyclic = g.cyclic;
  for (const auto& n : g.nodes) st.edges += n.data_in.size() + n.ctrl_in.size();
  return st;
}

}  // namespace opf::chakra
