// rms_norm — CPU module (scalar placeholder; replaced by the SIMD version).
#include <cmath>
#include <cstdint>

#include "opforge/dtype.h"
#include "opforge/module.h"

namespace {

template <class T> float load(const T* p, int64_t i);
template <> float load(const float* p, int64_t i) { return p[i]; }

int run(const opf_call* call, char* err, size_t len) {
  return opf::module::guarded(call, err, len, [](const opf_call* c) {
    if (std::string_view(c->entry) != "forward") opf::module::fail("%sentry not implemented yet");
    opf::module::expect_args(c, 6);
    const auto& x = c->args[0];
    const int64_t rows = x.shape[0], cols = x.shape[1];
    const float eps = float(c->params[0]);
    if (x.dtype != OPF_F32) opf::module::fail("%sdtype not implemented yet");
    auto* xp = static_cast<const float*>(x.data);
    auto* g = static_cast<const float*>(c->args[1].data);
    auto* b = static_cast<const float*>(c->args[2].data);
    auto* y = static_cast<float*>(c->args[3].data);
    auto* mean = static_cast<float*>(c->args[4].data);
    auto* rstd = static_cast<float*>(c->args[5].data);
    for (int64_t i = 0; i < rows; ++i) {
      float m = 0, v = 0;
      for (int64_t j = 0; j < cols; ++j) m += xp[i * cols + j];
      m /= float(cols);
      for (int64_t j = 0; j < cols; ++j) v += (xp[i * cols + j] - m) * (xp[i * cols + j] - m);
      v /= float(cols);
      const float r = 1.0f / std::sqrt(v + eps);
      for (int64_t j = 0; j < cols; ++j) y[i * cols + j] = (xp[i * cols + j] - m) * r * g[j] + b[j];
      mean[i] = m;
      rstd[i] = r;
    }
  });
}

}  // namespace

OPF_DEFINE_MODULE("rms_norm", "cpu", "scalar", run)
