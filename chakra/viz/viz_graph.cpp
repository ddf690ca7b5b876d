#include "viz_graph.h"

#include <algorithm>
#include <deque>
#include <unordered_map>

#include "et_stream.h"
#include "input_error.h"
#include "proto/et_def.pb.h"

namespace opf::chakra {

namespace {

struct FileNode {
  VizNode v;
  std::vector<uint64_t> data, ctrl;  // dependency ids as written
};

std::vector<FileNode> read_nodes(const std::string& path) {
  EtReader r(path, false);
  ChakraProtoMsg::GlobalMetadata meta;
  if (!r.next(meta)) throw InputError(path, "byte 0", "empty .et stream (no GlobalMetadata record)");
  std::vector<FileNode> out;
  ChakraProtoMsg::Node n;
  while (r.next(n)) {
    FileNode f;
    f.v.id = n.id();
    f.v.name = n.name();
    f.v.type = n.type();
    f.v.duration = n.duration_micros();
    for (const auto& a : n.attr()) {
      if (a.name() == "comm_type" && a.has_int64_val()) f.v.comm_type = a.int64_val();
      if (a.name() == "comm_size" && a.has_int64_val()) f.v.comm_size = a.int64_val();
    }
    f.data.assign(n.data_deps().begin(), n.data_deps().end());
    f.ctrl.assign(n.ctrl_deps().begin(), n.ctrl_deps().end());
    out.push_back(std::move(f));
  }
  return out;
}

// Longest-path depth by Kahn's algorithm; nodes never freed (cycles) go to one last layer.
size_t assign_depths(std::vector<VizNode>& nodes) {
  const size_t n = nodes.size();
  std::vector<std::vector<uint32_t>> children(n);
  std::vector<uint32_t> waiting(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t p : nodes[i].data_in) children[p].push_back(i), ++waiting[i];
    for (uint32_t p : nodes[i].ctrl_in) children[p].push_back(i), ++waiting[i];
  }
  std::deque<uint32_t> ready;
  for (uint32_t i = 0; i < n; ++i)
    if (!waiting[i]) ready.push_back(i);
  std::vector<bool> done(n, false);
  uint32_t max_depth = 0;
  while (!ready.empty()) {
    uint32_t i = ready.front();
    ready.pop_front();
    done[i] = true;
    max_depth = std::max(max_depth, nodes[i].depth);
    for (uint32_t c : children[i]) {
      nodes[c].depth = std::max(nodes[c].depth, nodes[i].depth + 1);
      if (--waiting[c] == 0) ready.push_back(c);
    }
  }
  size_t cyclic = 0;
  for (uint32_t i = 0; i < n; ++i)
    if (!done[i]) nodes[i].depth = max_depth + 1, ++cyclic;
  return cyclic;
}

// Order within layers: file order, then a downward and an upward barycentre sweep.
void assign_orders(VizGraph& g) {
  auto& nodes = g.nodes;
  uint32_t layers = 0;
  for (const auto& v : nodes) layers = std::max(layers, v.depth + 1);
  std::vector<std::vector<uint32_t>> by_layer(layers);
  for (uint32_t i = 0; i < nodes.size(); ++i) by_layer[nodes[i].depth].push_back(i);
  auto renumber = [&](std::vector<uint32_t>& layer) {
    for (uint32_t k = 0; k < layer.size(); ++k) nodes[layer[k]].order = k;
  };
  for (auto& l : by_layer) renumber(l);
  std::vector<std::vector<uint32_t>> children(nodes.size());
  for (uint32_t i = 0; i < nodes.size(); ++i) {
    for (uint32_t p : nodes[i].data_in) children[p].push_back(i);
    for (uint32_t p : nodes[i].ctrl_in) children[p].push_back(i);
  }
  // the layers' centres line up in the picture, so compare positions relative to the centre
  auto centred = [&](uint32_t i) { return double(nodes[i].order) - double(by_layer[nodes[i].depth].size()) / 2; };
  auto sweep = [&](uint32_t d, bool from_parents) {
    std::vector<std::pair<double, uint32_t>> key;
    for (uint32_t i : by_layer[d]) {
      double sum = 0;
      size_t cnt = 0;
      auto add = [&](uint32_t o) { sum += centred(o), ++cnt; };
      if (from_parents) {
        for (uint32_t p : nodes[i].data_in) add(p);
        for (uint32_t p : nodes[i].ctrl_in) add(p);
      } else {
        for (uint32_t c : children[i]) add(c);
      }
      key.emplace_back(cnt ? sum / double(cnt) : centred(i), i);
    }
    std::stable_sort(key.begin(), key.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = 0; k < key.size(); ++k) by_layer[d][k] = key[k].second;
    renumber(by_layer[d]);
  };
  for (uint32_t d = 1; d < layers; ++d) sweep(d, true);
  for (uint32_t d = layers; d-- > 1;) sweep(d - 1, false);
  g.layer_size.clear();
  for (const auto& l : by_layer) g.layer_size.push_back(uint32_t(l.size()));
}

}  // namespace

VizGraph load_viz_graph(const std::string& path, const VizSelection& sel) {
  VizGraph g;
  g.source = path;
  std::vector<FileNode> all = read_nodes(path);
  g.file_nodes = all.size();
  std::unordered_map<uint64_t, uint32_t> index;
  for (uint32_t i = 0; i < all.size(); ++i)
    if (!index.emplace(all[i].v.id, i).second) ++g.duplicate_ids;
  auto find = [&](uint64_t id) {
    auto it = index.find(id);
    return it == index.end() ? UINT32_MAX : it->second;
  };
  for (const auto& f : all) {
    for (uint64_t d : f.data) g.missing_deps += find(d) == UINT32_MAX;
    for (uint64_t d : f.ctrl) g.missing_deps += find(d) == UINT32_MAX;
  }

  std::vector<bool> keep(all.size(), sel.range || sel.around ? false : true);
  g.selection = "all nodes";
  if (sel.range) {
    auto [lo, hi] = *sel.range;
    for (uint32_t i = 0; i < all.size(); ++i) keep[i] = all[i].v.id >= lo && all[i].v.id <= hi;
    g.selection = "ids " + std::to_string(lo) + ".." + std::to_string(hi);
  } else if (sel.around) {
    uint32_t start = find(*sel.around);
    if (start == UINT32_MAX)
      throw InputError(path, "--around", "node " + std::to_string(*sel.around) + " is not in the file");
    std::vector<std::vector<uint32_t>> adj(all.size());  // undirected, data and ctrl
    for (uint32_t i = 0; i < all.size(); ++i)
      for (const auto* deps : {&all[i].data, &all[i].ctrl})
        for (uint64_t d : *deps)
          if (uint32_t p = find(d); p != UINT32_MAX) adj[i].push_back(p), adj[p].push_back(i);
    std::vector<uint32_t> dist(all.size(), UINT32_MAX);
    std::deque<uint32_t> q{start};
    dist[start] = 0;
    while (!q.empty()) {
      uint32_t i = q.front();
      q.pop_front();
      keep[i] = true;
      if (dist[i] == sel.depth) continue;
      for (uint32_t j : adj[i])
        if (dist[j] == UINT32_MAX) dist[j] = dist[i] + 1, q.push_back(j);
    }
    g.selection = "within " + std::to_string(sel.depth) + " of node " + std::to_string(*sel.around);
  }

  std::vector<uint32_t> remap(all.size(), UINT32_MAX);
  for (uint32_t i = 0; i < all.size(); ++i)
    if (keep[i]) remap[i] = uint32_t(g.nodes.size()), g.nodes.push_back(std::move(all[i].v));
  if (g.nodes.empty()) throw InputError(path, sel.range ? "--range" : "", "no node selected (" + g.selection + ")");
  for (uint32_t i = 0; i < all.size(); ++i) {
    if (!keep[i]) continue;
    VizNode& v = g.nodes[remap[i]];
    auto link = [&](const std::vector<uint64_t>& deps, std::vector<uint32_t>& into) {
      for (uint64_t d : deps) {
        uint32_t p = find(d);
        if (p == UINT32_MAX || remap[p] == UINT32_MAX || p == i) ++v.outside_deps;
        else into.push_back(remap[p]);
      }
    };
    link(all[i].data, v.data_in);
    link(all[i].ctrl, v.ctrl_in);
  }
  g.cyclic = assign_depths(g.nodes);
  assign_orders(g);
  return g;
}

}  // namespace opf::chakra
