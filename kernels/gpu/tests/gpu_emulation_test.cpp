// The generic launcher (core/gpu_module.h) and an op's host launcher (gpu/launcher.h), run on
// the host emulation of the GPU (emu_backend.h). Every op's kernels are swept against the float64
// reference by the emulation sweep (harness/suites/emu_sweep_test.cpp); this file checks the
// launch layer itself: malformed calls refused with a message, a host launcher's context.
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "emu_backend.h"
#include "opforge/call.h"
#include "opforge/dtype.h"

namespace opf {
namespace {

using emu::emu_backend;
using emu::emu_module;
using emu::EmuApi;

// OPFORGE_SEED replays a run; otherwise fresh, and printed by the failing test.
uint64_t base_seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("OPFORGE_SEED");
    return e && *e ? std::strtoull(e, nullptr, 10) : uint64_t(std::random_device{}());
  }();
  return s;
}

// The Device calls the GPU benchmarks use (copy probe, event timing, L2 rotation), through the
// same GpuDevice a real backend has: a copy moves every byte, time() runs its work once.
TEST(EmuDevice, CopiesAndTimesThroughTheGpuDevice) {
  Device& d = emu_backend().device();
  std::mt19937_64 rng(base_seed());
  std::vector<uint8_t> host(4099), back(4099, 0);
  for (auto& v : host) v = uint8_t(rng() | 1);  // never zero
  void* a = d.alloc(host.size());
  void* b = d.alloc(host.size());
  d.to_device(a, host.data(), host.size());
  d.copy(b, a, host.size());
  d.to_host(back.data(), b, back.size());
  EXPECT_EQ(back, host) << "seed " << base_seed();
  int calls = 0;
  const double s = d.time([&] { ++calls; });
  EXPECT_EQ(calls, 1);
  EXPECT_GE(s, 0.0);
  EXPECT_EQ(d.cache_bytes(), 0u);  // the emulation has no L2: benchmarks would not rotate
  d.free(a);
  d.free(b);
}

// The generic launcher checks a call against the op's argument list before launching: on a
// device, a missing tensor or a wrong dtype would be a fault, not a message.
TEST(EmuLauncher, RejectsMalformedCalls) {
  const OpInfo* op = find_op("layer_norm");
  if (!op || (!op->has_backend("cuda") && !op->has_backend("hip")))
    GTEST_SKIP() << "layer_norm has no GPU backend here";
  const opf_module_info* m = emu_module(*op, 32);
  std::vector<float> x(16, 1.0f), g(8, 1.0f), b(8, 0.0f), y(16), mean(2), rstd(2);
  auto t = [](void* p, DType d, std::vector<int64_t> shape) {
    opf_tensor r{p, int32_t(d), int32_t(shape.size()), {}, {}};
    const Shape st = contiguous_strides(shape);
    for (size_t i = 0; i < shape.size(); ++i) r.shape[i] = shape[i], r.strides[i] = st[i];
    return r;
  };
  std::vector<opf_tensor> args = {t(x.data(), DType::f32, {2, 8}), t(g.data(), DType::f32, {8}),
                                  t(b.data(), DType::f32, {8}),    t(y.data(), DType::f32, {2, 8}),
                                  t(mean.data(), DType::f32, {2}), t(rstd.data(), DType::f32, {2})};
  opf_param eps{"eps", OPF_PARAM_F64, 0, 1e-5, 0};
  char err[512];
  auto run = [&](const char* entry, int nargs) {
    err[0] = 0;
    std::vector<opf_arg> a;
    for (int i = 0; i < nargs; ++i) a.push_back(opf_arg{1, &args[size_t(i)]});
    opf_call c{entry, a.data(), nargs, &eps, 1, nullptr, nullptr};
    return m->run(m, &c, err, sizeof err);
  };
  ASSERT_EQ(run("forward", 6), 0) << err;  // the well-formed call works
  EXPECT_NEAR(y[0], 0.0, 1e-6);            // constant rows normalise to beta
  EXPECT_NE(run("forward", 5), 0);
  EXPECT_NE(std::string(err).find("expects 6 tensors, got 5"), std::string::npos) << err;
  EXPECT_NE(run("sideways", 6), 0);
  EXPECT_NE(std::string(err).find("no entry 'sideways'"), std::string::npos) << err;
  args[4].dtype = int32_t(DType::f16);
  EXPECT_NE(run("forward", 6), 0);
  EXPECT_NE(std::string(err).find("tensor 'mean' must be f32"), std::string::npos) << err;
  args[4].dtype = int32_t(DType::f32);
  args[1].shape[0] = 7;  // gamma [cols] against x [rows, cols]: one binding for every argument
  EXPECT_NE(run("forward", 6), 0);
  EXPECT_NE(std::string(err).find("argument 'gamma' dim 0 (cols) is 7, but argument 'x' gave cols = 8"),
            std::string::npos)
      << err;
  args[1].shape[0] = 8;
  args[2].data = nullptr;
  EXPECT_NE(run("forward", 6), 0);
  EXPECT_NE(std::string(err).find("tensor 2 has no data"), std::string::npos) << err;
}

// An op's host launcher (gpu/launcher.h) takes over run/supports: here a test launcher for
// layer_norm that launches the same kernels as the generic plan, so the outputs must agree bit for
// bit (backward also uses the context's workspace); its supports() reason comes through.
TEST(EmuLauncher, OpsLauncherRunsThroughTheContext) {
  const OpInfo* op = find_op("layer_norm");
  if (!op || (!op->has_backend("cuda") && !op->has_backend("hip")))
    GTEST_SKIP() << "layer_norm has no GPU backend here";
  const char* dir = std::getenv("OPFORGE_EMU_DIR");
  const std::string base = dir ? dir : ".";
  const opf_gpu_launcher* launcher = detail::open_launcher(*op, base + "/emu_layer_norm_launch.so");
  OpInfo other = *op;
  other.name = "rms_norm";
  try {
    detail::open_launcher(other, base + "/emu_layer_norm_launch.so");
    ADD_FAILURE() << "a launcher for another op was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("it is for op 'layer_norm'"), std::string::npos) << e.what();
  }
  static EmuApi api;  // modules keep a reference for the process's life
  void* code = nullptr;
  ASSERT_EQ(api.load(&code, base + "/emu_layer_norm_w32.so"), 0) << api.load_error;
  static std::unique_ptr<detail::GpuModule<EmuApi>> with_launcher;
  with_launcher = std::make_unique<detail::GpuModule<EmuApi>>(api, code, *op, "emu", "emulated", "test", launcher);
  const opf_module_info* generic = emu_module(*op, 32);

  const int64_t rows = 5, cols = 77;
  std::mt19937_64 rng(base_seed());
  std::printf("seed %llu (OPFORGE_SEED replays)\n", (unsigned long long)base_seed());
  std::uniform_real_distribution<float> u(-2.0f, 3.0f);
  auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    return v;
  };
  const std::vector<float> x = fill(size_t(rows * cols)), g = fill(size_t(cols)), b = fill(size_t(cols)),
                           dy = fill(size_t(rows * cols));
  struct Out {
    std::vector<float> y, mean, rstd, dx, dg, db;
  };
  auto run_with = [&](const opf_module_info* m) {
    Out o{std::vector<float>(x.size(), NAN),     std::vector<float>(size_t(rows), NAN),
          std::vector<float>(size_t(rows), NAN), std::vector<float>(x.size(), NAN),
          std::vector<float>(size_t(cols), NAN), std::vector<float>(size_t(cols), NAN)};
    CallBuilder f(*op, "forward");
    f.add("x", const_cast<float*>(x.data()), DType::f32, {rows, cols})
        .add("gamma", const_cast<float*>(g.data()), DType::f32, {cols});
    f.add("beta", const_cast<float*>(b.data()), DType::f32, {cols}).add("y", o.y.data(), DType::f32, {rows, cols});
    f.add("mean", o.mean.data(), DType::f32, {rows}).add("rstd", o.rstd.data(), DType::f32, {rows});
    f.run(m);
    CallBuilder bw(*op, "backward");
    bw.add("dy", const_cast<float*>(dy.data()), DType::f32, {rows, cols})
        .add("x", const_cast<float*>(x.data()), DType::f32, {rows, cols});
    bw.add("mean", o.mean.data(), DType::f32, {rows}).add("rstd", o.rstd.data(), DType::f32, {rows});
    bw.add("gamma", const_cast<float*>(g.data()), DType::f32, {cols}).add("dx", o.dx.data(), DType::f32, {rows, cols});
    bw.add("dgamma", o.dg.data(), DType::f32, {cols}).add("dbeta", o.db.data(), DType::f32, {cols});
    bw.run(m);
    return o;
  };
  const Out want = run_with(generic), got = run_with(with_launcher->info());
  auto same = [](const std::vector<float>& p, const std::vector<float>& q) {
    return std::memcmp(p.data(), q.data(), p.size() * sizeof(float)) == 0;
  };
  EXPECT_TRUE(same(got.y, want.y) && same(got.mean, want.mean) && same(got.rstd, want.rstd)) << "forward differs";
  EXPECT_TRUE(same(got.dx, want.dx) && same(got.dg, want.dg) && same(got.db, want.db)) << "backward differs";
  EXPECT_FALSE(std::isnan(got.dg[0])) << "backward left dgamma unwritten";

  std::vector<uint16_t> h(size_t(rows * cols));
  CallBuilder f16(*op, "forward");
  f16.add("x", h.data(), DType::f16, {rows, cols}).add("gamma", h.data(), DType::f16, {cols});
  f16.add("beta", h.data(), DType::f16, {cols}).add("y", h.data(), DType::f16, {rows, cols});
  f16.add("mean", h.data(), DType::f32, {rows}).add("rstd", h.data(), DType::f32, {rows});
  EXPECT_EQ(f16.supports(with_launcher->info()), "test launcher: f16 not supported");
  EXPECT_EQ(f16.supports(generic), "");
}

}  // namespace
}  // namespace opf
