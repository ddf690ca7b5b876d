// Every op's kernel.cu, run on the CPU through the host emulation (gpu_emulation.h) and the real
// generic launcher (core/gpu_module.h), against the op's float64 reference: for each op with a GPU
// backend x emulated warp size (32 = CUDA, 64 = CDNA wavefront) x dtype x entry x manifest case.
// Seeded random inputs (seed printed; OPFORGE_SEED replays), outputs poisoned before the run,
// every element compared. What this cannot show: device-specific behaviour (real shuffles, memory
// ordering, fast-math intrinsics, the driver's module loader) — that is tools/device_check.sh.
#include <dlfcn.h>
#include <link.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>

#include <gtest/gtest.h>

#include "core/gpu_backend.h"
#include "opforge/call.h"
#include "opforge/dtype.h"
#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf {
namespace {

// ------------------------------------------------------------------ the emulated "driver"
// An adapter like cuda_backend.cpp's, over dlopen()ed host builds of kernel.cu: the tests below
// go through the same GpuBackend (module loading), GpuDevice (memory) and GpuModule (plans,
// argument checks, launches) as a real device.
using EmuKernel = void (*)(opf_gpu_args);
using EmuLaunch = int (*)(EmuKernel, const opf_gpu_args*, unsigned, unsigned, unsigned);

struct EmuFunction {
  EmuKernel kernel = nullptr;
  EmuLaunch launcher = nullptr;  // the launcher of the module the kernel came from (warp size)
};

struct EmuApi {
  using Module = void*;
  using Function = EmuFunction;
  static constexpr const char* name = "emu";
  static constexpr const char* prebuilt_suffix = ".so";
  static constexpr const char* artefact = "module.so";
  std::string load_error;

  std::string error(int rc) const {
    switch (rc) {
      case 1: return "symbol not found";
      case 2: return "dynamic shared memory is not emulated";
      case 3: return "barrier reached by only part of a block (see stderr)";
      case 4: return "out of host memory";
      case 5: return load_error;
    }
    return "emulation error " + std::to_string(rc);
  }
  Availability availability() const { return {true, "host emulation"}; }
  std::string arch() const { return "emulated"; }
  std::string device_name() const { return "host emulation"; }
  int make_current() { return 0; }

  int load(Module* m, const std::string& path) {
    *m = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!*m) load_error = ::dlerror();
    return *m ? 0 : 5;
  }
  int unload(Module m) { return ::dlclose(m); }
  int get_function(Function* f, Module m, const char* fn) {
    f->kernel = reinterpret_cast<EmuKernel>(::dlsym(m, fn));
    f->launcher = reinterpret_cast<EmuLaunch>(::dlsym(m, "opf_emu_launch"));
    return f->kernel && f->launcher ? 0 : 1;
  }
  int read_global(void* dst, size_t bytes, Module m, const char* global) {
    void* p = ::dlsym(m, global);
    if (!p) return 1;
    Dl_info info;
    void* extra = nullptr;
    if (!::dladdr1(p, &info, &extra, RTLD_DL_SYMENT) || !extra) return -1;
    if (static_cast<const ElfW(Sym)*>(extra)->st_size != bytes) return -1;
    std::memcpy(dst, p, bytes);
    return 0;
  }
  int launch(Function f, unsigned gx, unsigned gy, unsigned block, unsigned shared, void*, opf_gpu_args* a) {
    if (shared) return 2;
    return f.launcher(f.kernel, a, gx, gy, block) == 0 ? 0 : 3;
  }
  int alloc(void** p, size_t bytes) {
    *p = std::malloc(bytes);
    if (*p) std::memset(*p, 0xff, bytes);  // uninitialised on a device too
    return *p ? 0 : 4;
  }
  int release(void* p) {
    std::free(p);
    return 0;
  }
  int to_device(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  int to_host(void* dst, const void* src, size_t bytes) {
    std::memcpy(dst, src, bytes);
    return 0;
  }
  int synchronize() { return 0; }
  std::vector<std::string> jit_identity(const detail::JitSource&) const { throw Error("emu: no JIT"); }
  void jit_compile(const std::string&, const detail::JitSource&, const std::string&, const std::string&) const {
    throw Error("emu: no JIT");
  }
};

detail::GpuBackend<EmuApi>& emu_backend() {
  static detail::GpuBackend<EmuApi> b;
  return b;
}

// One emulated code object per (op, warp size), opened once.
const opf_module_info* emu_module(const OpInfo& op, int warp) {
  static std::map<std::string, const opf_module_info*> loaded;
  const char* dir = std::getenv("OPF_EMU_DIR");
  const std::string path = std::string(dir ? dir : ".") + "/emu_" + op.name + "_w" + std::to_string(warp) + ".so";
  auto& slot = loaded[path];
  if (!slot) slot = emu_backend().open(op, path);
  return slot;
}

// Buffers in the backend's device memory, freed on every exit path of a test.
struct DeviceBuffers {
  Device& dev;
  std::vector<void*> ptr;
  explicit DeviceBuffers(Device& d) : dev(d) {}
  ~DeviceBuffers() {
    for (void* p : ptr) dev.free(p);
  }
  void* upload(const std::vector<unsigned char>& host) {
    ptr.push_back(dev.alloc(host.size()));
    dev.to_device(ptr.back(), host.data(), host.size());
    return ptr.back();
  }
};

// ------------------------------------------------------------------ storage conversions
double decode(DType t, const unsigned char* p) { return load_element(t, p, 0); }
void encode(DType t, double v, unsigned char* p) { store_element(t, p, 0, v); }

double round_to(DType t, double v) {
  unsigned char b[8];
  encode(t, v, b);
  return decode(t, b);
}

uint64_t base_seed() {
  static const uint64_t s = [] {
    const char* e = std::getenv("OPFORGE_SEED");
    return e && *e ? std::strtoull(e, nullptr, 10) : uint64_t(std::random_device{}());
  }();
  return s;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct Case {
  const OpInfo* op;
  int warp;
  DType dtype;
  std::string entry;
  Shape shape;
  std::string name;
};

void run_case(const Case& c) {
  const Params params = c.op->default_params();
  CaseDesc desc = describe_case(*c.op, c.entry, c.dtype, c.shape, params);
  if (!desc.unsupported.empty()) GTEST_SKIP() << desc.unsupported;
  const uint64_t seed = base_seed() ^ fnv1a(c.name);
  std::printf("seed %" PRIu64 " (OPFORGE_SEED=%" PRIu64 ")\n", seed, base_seed());
  std::mt19937_64 rng(seed);

  const size_t n = desc.args.size();
  std::vector<RefArg> ref(n);
  for (size_t i = 0; i < n; ++i) {
    const ArgDesc& a = desc.args[i];
    ref[i].desc = &a;
    ref[i].v.assign(size_t(a.numel()), 0.0);
    if (a.role == Role::out || a.derived) continue;
    for (auto& v : ref[i].v) {
      if (a.fill.kind == Fill::mask) v = std::bernoulli_distribution(a.fill.p)(rng) ? 1.0 : 0.0;
      else v = round_to(a.dtype, std::uniform_real_distribution<double>(a.fill.lo, a.fill.hi)(rng));
    }
  }
  if (c.op->spec->prepare) c.op->spec->prepare(c.entry, ref, params);
  for (size_t i = 0; i < n; ++i)
    if (desc.args[i].derived)
      for (auto& v : ref[i].v) v = round_to(desc.args[i].dtype, v);

  std::vector<std::vector<unsigned char>> buf(n);
  for (size_t i = 0; i < n; ++i) {
    const ArgDesc& a = desc.args[i];
    const size_t es = dtype_size(a.dtype);
    buf[i].assign(ref[i].v.size() * es + 64, 0xff);  // poison (NaN for every float dtype) + guard
    if (a.role != Role::out)
      for (size_t j = 0; j < ref[i].v.size(); ++j) encode(a.dtype, ref[i].v[j], &buf[i][j * es]);
  }
  const std::vector<std::vector<unsigned char>> inputs_before = buf;
  const std::vector<RefArg> ref_inputs = ref;
  c.op->spec->reference(c.entry, ref, params);

  // Measured sensitivity, as the CPU sweep's p_i (harness/suites/tolerance.h): how far each output
  // element moves when one floating input's elements are scaled by (1 +- f32 roundoff), random
  // signs. An output that cancels by construction (a 3-row dbeta of terms ~1 summing to ~1e-4)
  // is then judged against the rounding of its terms, not of its tiny result.
  std::vector<std::vector<double>> sensitivity(n);
  for (size_t i = 0; i < n; ++i) sensitivity[i].assign(ref[i].v.size(), 0.0);
  std::mt19937_64 sign_rng(seed ^ 0x5eed5eedull);
  for (size_t k = 0; k < n; ++k) {
    const ArgDesc& a = desc.args[k];
    const bool floating =
        a.dtype == DType::f32 || a.dtype == DType::f16 || a.dtype == DType::bf16 || a.dtype == DType::f64;
    if (a.role == Role::out || a.fill.kind == Fill::mask || !floating) continue;
    std::vector<RefArg> pert = ref_inputs;
    for (auto& v : pert[k].v) v *= 1.0 + (sign_rng() & 1 ? 0x1p-24 : -0x1p-24);
    c.op->spec->reference(c.entry, pert, params);
    for (size_t i = 0; i < n; ++i)
      if (desc.args[i].role != Role::in)
        for (size_t j = 0; j < ref[i].v.size(); ++j)
          if (std::isfinite(pert[i].v[j]) && std::isfinite(ref[i].v[j]))
            sensitivity[i][j] += std::fabs(pert[i].v[j] - ref[i].v[j]);
  }

  const opf_module_info* m = nullptr;
  ASSERT_NO_THROW(m = emu_module(*c.op, c.warp));
  Device& dev = emu_backend().device();
  DeviceBuffers on_device(dev);
  CallBuilder call(*c.op, c.entry);
  call.params(params);
  for (size_t i = 0; i < n; ++i)  // poison and guard too
    call.add(desc.args[i].name, on_device.upload(buf[i]), desc.args[i].dtype, desc.args[i].shape);
  ASSERT_NO_THROW(call.run(m));
  dev.synchronize();
  for (size_t i = 0; i < n; ++i) dev.to_host(buf[i].data(), on_device.ptr[i], buf[i].size());

  for (size_t i = 0; i < n; ++i) {
    const ArgDesc& a = desc.args[i];
    const size_t es = dtype_size(a.dtype), count = ref[i].v.size();
    for (size_t g = count * es; g < buf[i].size(); ++g)
      ASSERT_EQ(buf[i][g], 0xff) << "kernel wrote past the end of '" << a.name << "'";
    if (a.role == Role::in) {
      EXPECT_TRUE(buf[i] == inputs_before[i]) << "kernel modified input '" << a.name << "'";
      continue;
    }
    // Storage rounding of the result plus f32 accumulation over the reduction, relative to the
    // output's scale; index bugs, a wrong divisor or a lost row are off by O(1).
    double scale = 0;
    for (double v : ref[i].v) scale = std::max(scale, std::fabs(v));
    const double ua = dtype_unit_roundoff(a.dtype);
    size_t bad = 0, first = 0;
    double first_got = 0;
    for (size_t j = 0; j < count; ++j) {
      const double got = decode(a.dtype, &buf[i][j * es]), want = ref[i].v[j];
      const double tol = 2 * ua * std::fabs(want) + 0x1p-14 * scale + 8 * sensitivity[i][j];
      if (!(std::fabs(got - want) <= tol)) {
        if (bad++ == 0) {
          first = j;
          first_got = got;
        }
      }
    }
    EXPECT_EQ(bad, 0u) << "'" << a.name << "': " << bad << " of " << count << " elements out of tolerance; first at "
                       << first << ": got " << first_got << ", want " << ref[i].v[first]
                       << "\nrepro: OPFORGE_SEED=" << base_seed() << " gpu_emulation_test --gtest_filter='emu."
                       << c.name << "'";
  }
}

class EmuTest : public ::testing::Test {
 public:
  explicit EmuTest(Case c) : c_(std::move(c)) {}
  void TestBody() override { run_case(c_); }

 private:
  Case c_;
};

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
  const char* dir = std::getenv("OPF_EMU_DIR");
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

void register_cases() {
  for (const OpInfo& op : op_table()) {
    if (!op.has_backend("cuda") && !op.has_backend("hip")) continue;
    for (int warp : {32, 64})
      for (const auto& dname : op.dtypes)
        for (const auto& entry : op.entries)
          for (const auto& shape : op.cases) {
            std::string sname;
            for (auto d : shape) {
              if (!sname.empty()) sname += 'x';
              sname += std::to_string(d);
            }
            Case c{&op,
                   warp,
                   *dtype_from_name(dname),
                   entry.name,
                   shape,
                   op.name + "/w" + std::to_string(warp) + "/" + dname + "/" + entry.name + "/" + sname};
            const std::string name = c.name;
            ::testing::RegisterTest("emu", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                    [c]() -> ::testing::Test* { return new EmuTest(c); });
          }
  }
}

}  // namespace
}  // namespace opf

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  opf::register_cases();
  std::printf("gpu emulation suite: base seed %" PRIu64 "\n", opf::base_seed());
  return RUN_ALL_TESTS();
}
