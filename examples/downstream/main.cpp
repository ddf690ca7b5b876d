// A program using an installed opforge: layer_norm on the CPU, checked against double math.
#include <cmath>
#include <cstdio>
#include <vector>

#include "opforge/call.h"
#include "opforge/error.h"
#include "opforge/loader.h"

int main() try {
  const int64_t rows = 4, cols = 33;
  const double eps = 1e-5;
  std::vector<float> x(rows * cols), gamma(cols), beta(cols), y(rows * cols), mean(rows), rstd(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(3 * std::sin(0.37 * double(i)) + 0.5 * double(i % 7));
  for (int64_t c = 0; c < cols; ++c) gamma[c] = 1 + 0.01f * float(c), beta[c] = 0.1f - 0.005f * float(c);

  const opf::OpInfo* op = opf::find_op("layer_norm");
  if (!op) throw opf::Error("this opforge has no layer_norm");
  const opf::LoadedModule& m = opf::Loader::instance().load(*op, "cpu");
  opf::CallBuilder call(*op, "forward");
  call.add("x", x.data(), opf::DType::f32, {rows, cols}).add("gamma", gamma.data(), opf::DType::f32, {cols});
  call.add("beta", beta.data(), opf::DType::f32, {cols}).add("y", y.data(), opf::DType::f32, {rows, cols});
  call.add("mean", mean.data(), opf::DType::f32, {rows}).add("rstd", rstd.data(), opf::DType::f32, {rows});
  call.param("eps", eps).run(m.info);

  double worst = 0;  // largest |y - reference|, the reference computed here in double
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mu += x[r * cols + c] / double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu) / double(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double ref = (x[r * cols + c] - mu) / std::sqrt(var + eps) * gamma[c] + beta[c];
      worst = std::fmax(worst, std::fabs(y[r * cols + c] - ref));
    }
  }
  const bool ok = worst < 1e-5;
  std::printf("layer_norm/cpu forward %lldx%lld from %s module %s: max |y - ref| = %.2g (%s)\n", (long long)rows,
              (long long)cols, std::string(opf::module_source_name(m.source)).c_str(), m.path.c_str(), worst,
              ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "downstream: %s\n", e.what());
  return 1;
}
