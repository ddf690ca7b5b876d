// Inline SVG charts for the self-contained HTML report (no JavaScript, no external files):
// horizontal bar charts with an optional reference line, and a status grid.
#pragma once

#include <string>
#include <vector>

namespace opf::svg {

std::string escape(const std::string& s);  // XML/HTML text escaping

struct Bar {
  std::string label;
  double value = 0;
  std::string color;       // CSS color
  std::string annotation;  // text after the bar ("" = the value)
};

struct BarChart {
  std::string title, unit;
  std::vector<Bar> bars;
  bool log_scale = false;
  double reference = 0;  // > 0: vertical dashed line at this value
  std::string reference_label;
  int width = 1100;
};
std::string bar_chart(const BarChart& c);

struct Grid {
  std::vector<std::string> rows, cols;
  std::vector<std::vector<std::string>> status;  // [row][col]: pass, fail, skip, blocked, timeout, crash, ...
  std::vector<std::vector<std::string>> text;    // short cell text (e.g. duration)
};
std::string grid(const Grid& g);
std::string status_color(const std::string& status);

}  // namespace opf::svg
