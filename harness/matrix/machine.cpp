#include "matrix/machine.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <memory>
#include <thread>

#include "common/files.h"
#include "matrix/process.h"

namespace opf::matrix {
namespace {

std::string first_line(const std::string& s) {
  auto start = s.find_first_not_of(" \n\t");
  if (start == std::string::npos) return "";
  auto end = s.find('\n', start);
  return s.substr(start, end == std::string::npos ? std::string::npos : end - start);
}

std::string version_of(const std::vector<std::string>& argv, bool last_line = false) {
  std::string out;
  if (!proc::capture(argv, out, "", 30)) return "";
  if (!last_line) return first_line(out);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  auto p = out.rfind('\n');
  return p == std::string::npos ? out : out.substr(p + 1);
}

}  // namespace

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown-host";
  std::string h(buf);
  for (auto& c : h)
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-') c = '-';
  return h.empty() ? "unknown-host" : h;
}

json::Value git_state(const std::string& src) {
  json::Value v;
  std::string out;
  if (proc::capture({"git", "-C", src, "rev-parse", "HEAD"}, out)) {
    v.set("sha", first_line(out));
    std::string st;
    proc::capture({"git", "-C", src, "status", "--porcelain", "--untracked-files=no"}, st);
    v.set("dirty", !st.empty());
    std::string br;
    if (proc::capture({"git", "-C", src, "rev-parse", "--abbrev-ref", "HEAD"}, br)) v.set("branch", first_line(br));
  } else {
    v.set("sha", nullptr);
    v.set("dirty", nullptr);
    v.set("note", "not a git checkout");
  }
  return v;
}

json::Value toolchain_versions() {
  json::Value v;
  v.set("meson", version_of({"meson", "--version"}));
  v.set("ninja", version_of({"ninja", "--version"}));
  v.set("cxx", version_of({"c++", "--version"}));
  v.set("ccache", version_of({"ccache", "--version"}));
  std::string nvcc = files::exists("/usr/local/cuda/bin/nvcc") ? "/usr/local/cuda/bin/nvcc" : "nvcc";
  v.set("nvcc", version_of({nvcc, "--version"}, true));
  v.set("hipcc", version_of({"hipcc", "--version"}));
  return v;
}

json::Value machine_facts() {
  json::Value v;
  v.set("host", host_name());
  std::ifstream cpu("/proc/cpuinfo");
  std::string line, model;
  while (std::getline(cpu, line))
    if (line.rfind("model name", 0) == 0) {
      model = line.substr(line.find(':') + 2);
      break;
    }
  v.set("cpu_model", model);
  v.set("cores", int64_t(std::thread::hardware_concurrency()));
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  v.set("mem_gb", double(pages) * double(page) / 1e9);
  utsname u{};
  if (uname(&u) == 0) v.set("kernel", std::string(u.sysname) + " " + u.release + " " + u.machine);
  return v;
}

json::Value bandwidth_probe(size_t bytes_per_array, int reps) {
  size_t n = bytes_per_array / sizeof(double);
  std::unique_ptr<double[]> a(new double[n]), b(new double[n]), c(new double[n]);
  for (size_t i = 0; i < n; ++i) {
    a[i] = 0;
    b[i] = 1.0 + double(i % 7);
    c[i] = 2.0 - double(i % 5);
  }
  const double s = 3.0;
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    double* __restrict pa = a.get();
    const double* __restrict pb = b.get();
    const double* __restrict pc = c.get();
    for (size_t i = 0; i < n; ++i) pa[i] = pb[i] + s * pc[i];
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, t);
  }
  // keep the result observable so the loop is not dropped
  volatile double sink = a[n / 2];
  (void)sink;
  json::Value v;
  v.set("method", "triad a=b+s*c, 1 thread, best of " + std::to_string(reps) + ", 3 arrays counted");
  v.set("bytes_per_array", int64_t(bytes_per_array));
  v.set("triad_gbs", 3.0 * double(bytes_per_array) / best / 1e9);
  return v;
}

}  // namespace opf::matrix
