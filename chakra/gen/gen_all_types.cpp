// all-types: every valid node type in turn, every attribute value kind on node 0, every Node
// field somewhere. Nothing depends on a METADATA node: ASTRA-sim completes METADATA nodes
// without releasing their children, so a graph that waits on one would stall there.
#include "gen_context.h"

namespace opf::chakra::gen {

namespace {

using ChakraProtoMsg::AttributeProto;
using NT = ChakraProtoMsg::NodeType;

constexpr NT kCycle[] = {ChakraProtoMsg::METADATA_NODE, ChakraProtoMsg::MEM_LOAD_NODE,  ChakraProtoMsg::MEM_STORE_NODE,
                         ChakraProtoMsg::COMP_NODE,     ChakraProtoMsg::COMM_SEND_NODE, ChakraProtoMsg::COMM_RECV_NODE,
                         ChakraProtoMsg::COMM_COLL_NODE};
constexpr uint64_t kTypes = sizeof kCycle / sizeof kCycle[0];

AttributeProto* attr(ChakraProtoMsg::Node& n, const char* name) {
  auto* a = n.add_attr();
  a->set_name(name);
  return a;
}

// One attribute per value kind of AttributeProto, named after the kind.
void every_attribute_kind(ChakraProtoMsg::Node& n, Rng& r) {
  const int64_t v = int64_t(r.below(1000)) - 500;
  attr(n, "double_val")->set_double_val(double(v) / 8);
  auto* dl = attr(n, "double_list")->mutable_double_list();
  dl->add_values(0.25), dl->add_values(-1e300);
  attr(n, "float_val")->set_float_val(float(v) / 4);
  attr(n, "float_list")->mutable_float_list()->add_values(1.5f);
  attr(n, "int32_val")->set_int32_val(int32_t(v));
  attr(n, "int32_list")->mutable_int32_list()->add_values(-2147483647 - 1);
  attr(n, "int64_val")->set_int64_val(v * 1000000007);
  attr(n, "int64_list")->mutable_int64_list()->add_values(INT64_MIN);
  attr(n, "uint32_val")->set_uint32_val(uint32_t(r.next()));
  attr(n, "uint32_list")->mutable_uint32_list()->add_values(UINT32_MAX);
  attr(n, "uint64_val")->set_uint64_val(r.next());
  attr(n, "uint64_list")->mutable_uint64_list()->add_values(UINT64_MAX);
  attr(n, "sint32_val")->set_sint32_val(int32_t(-v));
  attr(n, "sint32_list")->mutable_sint32_list()->add_values(-1);
  attr(n, "sint64_val")->set_sint64_val(-v * 1000000007);
  attr(n, "sint64_list")->mutable_sint64_list()->add_values(INT64_MIN);
  attr(n, "fixed32_val")->set_fixed32_val(uint32_t(r.next()));
  attr(n, "fixed32_list")->mutable_fixed32_list()->add_values(7);
  attr(n, "fixed64_val")->set_fixed64_val(r.next());
  attr(n, "fixed64_list")->mutable_fixed64_list()->add_values(UINT64_MAX);
  attr(n, "sfixed32_val")->set_sfixed32_val(int32_t(v));
  attr(n, "sfixed32_list")->mutable_sfixed32_list()->add_values(-7);
  attr(n, "sfixed64_val")->set_sfixed64_val(v);
  attr(n, "sfixed64_list")->mutable_sfixed64_list()->add_values(INT64_MIN);
  attr(n, "bool_val")->set_bool_val(v % 2 == 0);
  auto* bl = attr(n, "bool_list")->mutable_bool_list();
  bl->add_values(true), bl->add_values(false);
  attr(n, "string_val")->set_string_val("caf\xc3\xa9 \xe2\x82\xac");  // non-ASCII UTF-8
  auto* sl = attr(n, "string_list")->mutable_string_list();
  sl->add_values(std::string()), sl->add_values(std::string("b"));
  attr(n, "bytes_val")->set_bytes_val(std::string("\x00\xff\x80", 3));
  attr(n, "bytes_list")->mutable_bytes_list()->add_values(std::string(1, '\0'));
}

}  // namespace

void all_types(Context& c) {
  const uint64_t ranks = c.opt.ranks;
  const int32_t next_rank = int32_t((c.rank + 1) % ranks), prev_rank = int32_t((c.rank + ranks - 1) % ranks);
  uint64_t start = 0;
  int64_t last_work = -1, older_work = -1;  // the last two non-METADATA nodes
  uint64_t send_size = 0;
  for (uint64_t k = 0; k < c.opt.nodes; ++k) {
    const NT type = kCycle[k % kTypes];
    std::string name = ChakraProtoMsg::NodeType_Name(type) + "_" + std::to_string(k);
    auto& n = c.begin(k, name, type);
    if (last_work >= 0) n.add_data_deps(uint64_t(last_work));
    if (older_work >= 0) n.add_ctrl_deps(uint64_t(older_work));
    n.set_start_time_micros(start);
    uint64_t size = uint64_t(1) << c.shape.between(10, 26);  // same on every rank: sends meet receives
    switch (type) {
      case ChakraProtoMsg::METADATA_NODE:
        if (k == 0) every_attribute_kind(n, c.shape);
        else add_int64(n, "sequence", int64_t(k));
        break;
      case ChakraProtoMsg::MEM_LOAD_NODE:
      case ChakraProtoMsg::MEM_STORE_NODE:
        n.set_duration_micros(c.compute_time());
        add_uint64(n, "tensor_size", size);
        break;
      case ChakraProtoMsg::COMP_NODE: {
        n.set_duration_micros(c.compute_time());
        add_int64(n, "num_ops", int64_t(size) * 2);
        add_uint64(n, "tensor_size", size);
        auto* in = n.mutable_inputs();
        in->set_values("[[" + std::to_string(k) + ",1,0,64,4,\"cuda:0\"]]");
        in->set_shapes("[[8,8]]");
        in->set_types("[\"Tensor(float)\"]");
        auto* out = n.mutable_outputs();
        out->set_values("[[" + std::to_string(k + 1) + ",2,0,64,4,\"cuda:0\"]]");
        out->set_shapes("[[8,8]]");
        out->set_types("[\"Tensor(float)\"]");
        break;
      }
      case ChakraProtoMsg::COMM_SEND_NODE:
        add_int32(n, "comm_dst", next_rank);
        send_size = size;
        add_int64(n, "comm_size", int64_t(size));
        add_int32(n, "comm_tag", int32_t(k));
        break;
      case ChakraProtoMsg::COMM_RECV_NODE:
        // the previous rank's send of the node before this one
        add_int32(n, "comm_src", prev_rank);
        add_int64(n, "comm_size", int64_t(send_size));
        add_int32(n, "comm_tag", int32_t(k - 1));
        break;
      case ChakraProtoMsg::COMM_COLL_NODE:
        add_int64(n, "comm_type", ChakraProtoMsg::ALL_REDUCE);
        add_int64(n, "comm_size", int64_t(size));
        break;
      default: break;
    }
    add_bool(n, "is_cpu_op", true);
    start += n.duration_micros();
    c.emit();
    if (type != ChakraProtoMsg::METADATA_NODE) older_work = last_work, last_work = int64_t(k);
  }
}

}  // namespace opf::chakra::gen
