// `opforge report <run>`: the run as Markdown (report.md) and as one self-contained HTML page
// (report.html, inline CSS and SVG, no scripts): the cell x step grid, tests, per-op
// performance against its peers and the bandwidth probe, JIT cold/warm load times, Chakra
// conversion times and regression status, inventory mismatches and the GPU debt ledger.
#pragma once

#include <string>

namespace opf::matrix {

struct ReportFiles {
  std::string markdown, html;
};

ReportFiles render_report(const std::string& run_dir);
// Writes report.md and report.html into out_dir (default: the run dir); returns the HTML path.
std::string write_report(const std::string& run_dir, const std::string& out_dir = "");

}  // namespace opf::matrix
