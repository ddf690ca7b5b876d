// What the three formats agree on: a colour per node type and the text of a node's label and
// hover tooltip.
#pragma once

#include <string>

#include "viz_graph.h"

namespace opf::chakra::viz {

// Fill colour of a node type; types outside the enum get the INVALID_NODE colour.
const char* type_color(int type);
// "COMP_NODE", ... ("TYPE_<n>" for values outside the enum)
std::string type_name(int type);
// Tooltip: name, id, type, duration, comm type and size, deps outside the view; '\n'-separated.
std::string tooltip(const VizNode& n);
// The name cut to `max` code points with an ellipsis (box labels; the tooltip has it whole).
std::string short_name(const std::string& name, size_t max);

}  // namespace opf::chakra::viz
