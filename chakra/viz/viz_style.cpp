#include "viz_style.h"

#include "proto/et_def.pb.h"

namespace opf::chakra::viz {

const char* type_color(int type) {
  switch (type) {
    case ChakraProtoMsg::METADATA_NODE: return "#d9d9d9";
    case ChakraProtoMsg::MEM_LOAD_NODE: return "#9ecae1";
    case ChakraProtoMsg::MEM_STORE_NODE: return "#4292c6";
    case ChakraProtoMsg::COMP_NODE: return "#fdae6b";
    case ChakraProtoMsg::COMM_SEND_NODE: return "#a1d99b";
    case ChakraProtoMsg::COMM_RECV_NODE: return "#41ab5d";
    case ChakraProtoMsg::COMM_COLL_NODE: return "#e377c2";
    default: return "#ffffff";
  }
}

std::string type_name(int type) {
  if (ChakraProtoMsg::NodeType_IsValid(type)) return ChakraProtoMsg::NodeType_Name(ChakraProtoMsg::NodeType(type));
  return std::string("TYPE_") + std::to_string(type);  // not literal + string&&: GCC 12 -Wrestrict PR105651
}

std::string tooltip(const VizNode& n) {
  std::string t =
      n.name + "\nid " + std::to_string(n.id) + ", " + type_name(n.type) + ", " + std::to_string(n.duration) + " us";
  if (n.comm_type) {
    auto ct = ChakraProtoMsg::CollectiveCommType(*n.comm_type);
    t += std::string("\n") + (ChakraProtoMsg::CollectiveCommType_IsValid(int(*n.comm_type))
                                  ? ChakraProtoMsg::CollectiveCommType_Name(ct)
                                  : std::string("comm_type ") + std::to_string(*n.comm_type));
    if (n.comm_size) t.append(", ").append(std::to_string(*n.comm_size)).append(" bytes");
  }
  if (n.outside_deps) t.append("\n").append(std::to_string(n.outside_deps)).append(" dependencies outside this view");
  return t;
}

std::string short_name(const std::string& name, size_t max) {
  size_t cps = 0, i = 0;
  for (; i < name.size(); ++i) {
    if ((uint8_t(name[i]) & 0xc0) == 0x80) continue;  // continuation byte
    if (cps++ == max) break;
  }
  return i < name.size() ? name.substr(0, i) + "\xe2\x80\xa6" : name;
}

}  // namespace opf::chakra::viz
