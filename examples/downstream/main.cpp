// A program using an installed opforge: layer_norm on the CPU, checked against double math.
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "opforge/call.h"
#include "opforge/loader.h"

int main() try {
  const int64_t rows = 4, cols = 33;
  const double eps = 1e-5;
  std::vector<float> x(rows * cols), g(cols), b(cols), y(rows * cols), mean(rows), rstd(rows);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(3 * std::sin(0.37 * double(i)) + 0.5 * double(i % 7));
  for (int64_t c = 0; c < cols; ++c) g[c] = 1 + 0.01f * float(c), b[c] = 0.1f - 0.005f * float(c);

  const opf::OpInfo* found = opf::find_op("layer_norm");
  if (!found) throw std::runtime_error("this opforge was built without layer_norm");
  const opf::OpInfo& op = *found;
  const opf::LoadedModule& m = opf::Loader::instance().load(op, "cpu");
  opf::CallBuilder call(op, "forward");
  const auto f32 = opf::DType::f32;
  call.add("x", x.data(), f32, {rows, cols}).add("gamma", g.data(), f32, {cols}).add("beta", b.data(), f32, {cols});
  call.add("y", y.data(), f32, {rows, cols})
      .add("mean", mean.data(), f32, {rows})
      .add("rstd", rstd.data(), f32, {rows});
  call.param("eps", eps).run(m.info);

  double worst = 0;  // largest |y - reference|, the reference in double
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = &x[r * cols];
    double mu = 0, var = 0;
    for (int64_t c = 0; c < cols; ++c) mu += xr[c] / double(cols);
    for (int64_t c = 0; c < cols; ++c) var += (xr[c] - mu) * (xr[c] - mu) / double(cols);
    for (int64_t c = 0; c < cols; ++c)
      worst = std::fmax(worst, std::fabs(y[r * cols + c] - ((xr[c] - mu) / std::sqrt(var + eps) * g[c] + b[c])));
  }
  std::printf("layer_norm/cpu forward %lldx%lld from %s module %s: max |y - ref| = %.2g (%s)\n", (long long)rows,
              (long long)cols, std::string(opf::module_source_name(m.source)).c_str(), m.path.c_str(), worst,
              worst < 1e-5 ? "ok" : "FAILED");
  return worst < 1e-5 ? 0 : 1;
} catch (const std::exception& e) {  // opf::Error: one line naming what failed
  std::fprintf(stderr, "downstream: %s\n", e.what());
  return 1;
}
