// What every generator kind builds with: the options, two seeded random streams (the graph's
// shape from the seed alone, compute durations from the seed and the rank) and the .et being
// written. SplitMix64 is used because its output is fixed by its definition, unlike the
// standard library's distributions, so a seed gives the same files on every platform.
#pragma once

#include <cstdint>
#include <string>

#include "et_generator.h"
#include "et_stream.h"
#include "proto/et_def.pb.h"

namespace opf::chakra::gen {

class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }                       // [0, n)
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }  // [lo, hi]

 private:
  uint64_t s_;
};

struct Context {
  Context(const GenerateOptions& o, uint64_t r)
      : opt(o), rank(r), shape(o.seed), timing(o.seed ^ (0x5851f42d4c957f2dull * (r + 1))) {}

  // Starts a node; fill in `node`, then emit().
  ChakraProtoMsg::Node& begin(uint64_t id, const std::string& name, ChakraProtoMsg::NodeType type) {
    node.Clear();
    node.set_id(id);
    node.set_name(name);
    node.set_type(type);
    return node;
  }
  void emit() { writer.write(node); }

  uint64_t compute_time() { return timing.between(1, 1000); }

  const GenerateOptions& opt;
  uint64_t rank;
  Rng shape, timing;
  std::string bytes;
  EtWriter writer{bytes};
  ChakraProtoMsg::Node node;
};

inline void add_int64(ChakraProtoMsg::Node& n, const char* name, int64_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_int64_val(v);
}
inline void add_int32(ChakraProtoMsg::Node& n, const char* name, int32_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_int32_val(v);
}
inline void add_uint64(ChakraProtoMsg::Node& n, const char* name, uint64_t v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_uint64_val(v);
}
inline void add_bool(ChakraProtoMsg::Node& n, const char* name, bool v) {
  auto* a = n.add_attr();
  a->set_name(name);
  a->set_bool_val(v);
}

// The kinds (one file each).
void all_types(Context& c);
void chain(Context& c);
void fan(Context& c);
void dag(Context& c);
void collectives(Context& c);

}  // namespace opf::chakra::gen
