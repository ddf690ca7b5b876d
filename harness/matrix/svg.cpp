#include "matrix/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace opf::svg {

std::string escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string status_color(const std::string& s) {
  if (s == "pass") return "#2e9d4f";
  if (s == "fail" || s == "crash") return "#d43c3c";
  if (s == "timeout") return "#b5179e";
  if (s == "blocked") return "#9a9a9a";
  if (s == "skip" || s == "owed") return "#e0a526";
  if (s == "interrupted") return "#5c6bc0";
  return "#dddddd";
}

namespace {
std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);  // %g picks the exponent form for large and tiny values itself
  return b;
}
}  // namespace

std::string bar_chart(const BarChart& c) {
  const int label_w = 330, right_pad = 150, row_h = 22, top = 34, axis_h = 26;
  const int plot_w = c.width - label_w - right_pad;
  const int h = top + int(c.bars.size()) * row_h + axis_h + 8;
  double vmax = c.reference;
  double vmin = 1e300;
  for (const auto& b : c.bars) {
    vmax = std::max(vmax, b.value);
    if (b.value > 0) vmin = std::min(vmin, b.value);
  }
  if (vmax <= 0) vmax = 1;
  double lo = 0, hi = vmax * 1.05;
  if (c.log_scale) {
    lo = std::floor(std::log10(std::min(vmin, c.reference > 0 ? c.reference : vmin)));
    hi = std::ceil(std::log10(vmax));
    if (hi <= lo) hi = lo + 1;
  }
  auto x_of = [&](double v) {
    double f = c.log_scale ? (v > 0 ? (std::log10(v) - lo) / (hi - lo) : 0) : v / hi;
    return label_w + std::clamp(f, 0.0, 1.0) * plot_w;
  };
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                "font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n",
                c.width, h, c.width, h);
  s += buf;
  s += "<text x=\"4\" y=\"18\" font-size=\"14\" font-weight=\"bold\">" + escape(c.title) +
       (c.unit.empty() ? "" : " [" + escape(c.unit) + "]") + "</text>\n";
  // grid lines and ticks
  std::vector<double> ticks;
  if (c.log_scale) {
    for (double e = lo; e <= hi + 1e-9; e += 1) ticks.push_back(std::pow(10.0, e));
  } else {
    double step = std::pow(10.0, std::floor(std::log10(hi / 2)));
    if (hi / step > 10) step *= 2;
    for (double t = 0; t <= hi + 1e-12; t += step) ticks.push_back(t);
  }
  int axis_y = top + int(c.bars.size()) * row_h + 4;
  for (double t : ticks) {
    double x = x_of(t);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#e4e4e4\"/>"
                  "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#555\">%s</text>\n",
                  x, top - 4, x, axis_y, x, axis_y + 15, num(t).c_str());
    s += buf;
  }
  for (size_t i = 0; i < c.bars.size(); ++i) {
    const auto& b = c.bars[i];
    int y = top + int(i) * row_h;
    double x1 = x_of(c.log_scale ? std::pow(10.0, lo) : 0), x2 = x_of(b.value);
    std::snprintf(buf, sizeof buf,
                  "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>"
                  "<rect x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>%s: %s %s</title></rect>"
                  "<text x=\"%.1f\" y=\"%d\" fill=\"#333\">%s</text>\n",
                  label_w - 6, y + 15, escape(b.label).c_str(), x1, y + 3, std::max(1.0, x2 - x1), row_h - 6,
                  b.color.empty() ? "#4e79a7" : b.color.c_str(), escape(b.label).c_str(), num(b.value).c_str(),
                  escape(c.unit).c_str(), x2 + 4, y + 15,
                  escape(b.annotation.empty() ? num(b.value) : b.annotation).c_str());
    s += buf;
  }
  if (c.reference > 0) {
    double x = x_of(c.reference);
    std::snprintf(buf, sizeof buf,
                  "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#d43c3c\" stroke-width=\"1.5\" "
                  "stroke-dasharray=\"5,3\"/>"
                  "<text x=\"%.1f\" y=\"%d\" fill=\"#d43c3c\" text-anchor=\"middle\">%s</text>\n",
                  x, top - 2, x, axis_y, x, top - 6 > 12 ? top - 6 : 12, escape(c.reference_label).c_str());
    s += buf;
  }
  s += "</svg>\n";
  return s;
}

std::string grid(const Grid& g) {
  const int label_w = 260, col_w = 96, row_h = 26, top = 30;
  int w = label_w + int(g.cols.size()) * col_w + 10, h = top + int(g.rows.size()) * row_h + 10;
  std::string s;
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                "font-family=\"sans-serif\" font-size=\"12\" role=\"img\">\n",
                w, h, w, h);
  s += buf;
  for (size_t c = 0; c < g.cols.size(); ++c) {
    std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-weight=\"bold\">%s</text>\n",
                  label_w + int(c) * col_w + col_w / 2, top - 10, escape(g.cols[c]).c_str());
    s += buf;
  }
  for (size_t r = 0; r < g.rows.size(); ++r) {
    int y = top + int(r) * row_h;
    std::snprintf(buf, sizeof buf, "<text x=\"%d\" y=\"%d\" text-anchor=\"end\">%s</text>\n", label_w - 8, y + 17,
                  escape(g.rows[r]).c_str());
    s += buf;
    for (size_t c = 0; c < g.cols.size(); ++c) {
      std::string st = r < g.status.size() && c < g.status[r].size() ? g.status[r][c] : "";
      std::string tx = r < g.text.size() && c < g.text[r].size() ? g.text[r][c] : st;
      int x = label_w + int(c) * col_w;
      std::snprintf(
          buf, sizeof buf,
          "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"3\" fill=\"%s\"><title>%s / %s: %s</title></rect>"
          "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" fill=\"#fff\">%s</text>\n",
          x + 2, y + 2, col_w - 4, row_h - 4, status_color(st).c_str(), escape(g.rows[r]).c_str(),
          escape(g.cols[c]).c_str(), escape(st).c_str(), x + col_w / 2, y + 17, escape(tx).c_str());
      s += buf;
    }
  }
  s += "</svg>\n";
  return s;
}

}  // namespace opf::svg
