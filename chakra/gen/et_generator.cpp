#include "et_generator.h"

#include "gen_context.h"
#include "input_error.h"
#include "output_set.h"

namespace opf::chakra {

namespace {

struct Kind {
  const char* name;
  void (*build)(gen::Context&);
  uint64_t min_nodes;
};
constexpr Kind kKinds[] = {
    {"all-types", gen::all_types, 7},  // one node of each of the 7 types at least
    {"chain", gen::chain, 1},
    {"fan", gen::fan, 1},
    {"dag", gen::dag, 1},
    {"collectives", gen::collectives, 2},  // a COMP and its collective
};
// Bounds that keep one rank's file (built in memory) and the number of files reasonable.
constexpr uint64_t kMaxNodes = 10'000'000, kMaxRanks = 100'000;

const Kind* find_kind(const std::string& name) {
  for (const auto& k : kKinds)
    if (name == k.name) return &k;
  return nullptr;
}

}  // namespace

const char* generate_kinds() { return "all-types, chain, fan, dag, collectives"; }

void check_generate_options(const GenerateOptions& o) {
  const Kind* k = find_kind(o.kind);
  if (!k) throw InputError("--kind", "", "unknown kind '" + o.kind + "' (one of: " + generate_kinds() + ")");
  if (o.nodes < k->min_nodes || o.nodes > kMaxNodes)
    throw InputError("--nodes", "",
                     std::to_string(o.nodes) + " is out of range: " + o.kind + " needs " +
                         std::to_string(k->min_nodes) + " to " + std::to_string(kMaxNodes));
  if (o.ranks < 1 || o.ranks > kMaxRanks)
    throw InputError("--ranks", "", std::to_string(o.ranks) + " is out of range: 1 to " + std::to_string(kMaxRanks));
}

std::string generate_rank(const GenerateOptions& o, uint64_t rank) {
  gen::Context c(o, rank);
  ChakraProtoMsg::GlobalMetadata gm;
  gm.set_version("0.0.4");  // what ASTRA-sim's own generator writes; no host trace behind it
  auto* a = gm.add_attr();
  a->set_name("generator");
  a->set_string_val("opforge chakra generate --kind " + o.kind + " --nodes " + std::to_string(o.nodes) + " --ranks " +
                    std::to_string(o.ranks) + " --seed " + std::to_string(o.seed) + " (rank " + std::to_string(rank) +
                    ")");
  c.writer.write(gm);
  find_kind(o.kind)->build(c);
  return std::move(c.bytes);
}

void generate(const GenerateOptions& o, const std::string& prefix) {
  check_generate_options(o);
  OutputSet outs;
  for (uint64_t r = 0; r < o.ranks; ++r) outs.add(prefix + "." + std::to_string(r) + ".et", generate_rank(o, r));
  outs.publish();
}

}  // namespace opf::chakra
