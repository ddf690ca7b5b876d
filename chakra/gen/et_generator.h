// `opforge chakra generate`: synthetic Chakra .et files for tests and demos, one per rank
// (PREFIX.<rank>.et), deterministic for a given (kind, nodes, ranks, seed).
//
// Kinds:
//  all-types    every valid NodeType in turn (METADATA, MEM_LOAD, MEM_STORE, COMP, COMM_SEND,
//               COMM_RECV, COMM_COLL; INVALID_NODE is left out: no consumer runs it), node 0
//               carrying one attribute of every AttributeProto value kind, and every Node field
//               used somewhere (ctrl and data deps, start time, duration, inputs, outputs). Sends
//               go to the next rank and receives come from the previous one, with matching tags.
//  chain        COMP nodes, each data-dependent on the previous one.
//  fan          a root, N-2 independent nodes after it, and a sink after all of them.
//  dag          random DAG: each node depends on 1-3 of the 16 nodes before it (data deps), a
//               quarter of them also on an older one (ctrl dep).
//  collectives  per rank, COMP nodes alternating with COMM_COLL nodes; every rank has the same
//               collectives (type, size) in the same order, chained so they issue in that order.
// The graph's shape and the collectives depend on the seed only; compute durations also on the
// rank, so ranks differ the way real ranks do without disagreeing on communication.
#pragma once

#include <cstdint>
#include <string>

namespace opf::chakra {

struct GenerateOptions {
  std::string kind;
  uint64_t nodes = 16;
  uint64_t ranks = 1;
  uint64_t seed = 0;
};

// Throws InputError naming the option for an unknown kind or a size out of range.
void check_generate_options(const GenerateOptions& opt);

// The .et bytes of one rank's file (options already checked).
std::string generate_rank(const GenerateOptions& opt, uint64_t rank);

// Writes PREFIX.0.et ... PREFIX.<ranks-1>.et, all or none.
void generate(const GenerateOptions& opt, const std::string& prefix);

const char* generate_kinds();  // "all-types, chain, ..." for help and errors

}  // namespace opf::chakra
