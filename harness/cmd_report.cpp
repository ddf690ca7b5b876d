// `opforge report <run>`: Markdown + one self-contained HTML page for a recorded run.
#include <cstdio>
#include <memory>

#include "command.h"
#include "matrix/load_plan.h"
#include "matrix/report.h"
#include "matrix/run_layout.h"

namespace opf::cli {

void add_report_command(CLI::App& app) {
  struct Args {
    std::string run, out, source;
  };
  auto a = std::make_shared<Args>();
  auto* r = app.add_subcommand("report", "Write report.md and report.html (inline SVG plots) for a recorded run");
  r->add_option("run", a->run, "Run directory, or its name under results/runs/")->required();
  r->add_option("--out", a->out, "Directory for report.md / report.html (default: the run directory)");
  r->add_option("--source", a->source, "Source tree whose results/runs/ names resolve");
  on_run(r, [a] {
    std::string dir = matrix::resolve_run(a->run, a->source.empty() ? matrix::default_source_dir() : a->source);
    std::string html = matrix::write_report(dir, a->out);
    std::printf("%s\n%s\n", html.c_str(), (html.substr(0, html.size() - 4) + "md").c_str());
    return 0;
  });
}

}  // namespace opf::cli
