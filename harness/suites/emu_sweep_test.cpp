// Every GPU op's kernel.cu, compiled for the host through the GPU emulation (kernels/gpu/tests/
// gpu_emulation.h: exact barriers, warp 32 = CUDA and 64 = CDNA wavefronts) and launched by the
// real generic launcher, run through the correctness sweep of the CPU suite (sweep.h): every fill
// variant incl. NaN, every param set, every element against the float64 reference. One test per
// op x warp x dtype x entry x case: `emu.<op>/w<warp>/<dtype>/<entry>/<shape>`.
// What this cannot show: device-specific behaviour (real shuffles, memory ordering, fast-math
// intrinsics, the driver's module loader) — that is tools/device_check.sh.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "case_name.h"
#include "gpu/tests/emu_backend.h"
#include "opforge/error.h"
#include "seed.h"
#include "sweep.h"

namespace opf::suites {
namespace {

uint64_t g_base_seed = 0;

class EmuSweepTest : public ::testing::Test {
 public:
  EmuSweepTest(SweepCase c, int warp) : c_(std::move(c)), warp_(warp) {}

  void TestBody() override {
    const std::string repro = "repro: OPFORGE_SEED=" + std::to_string(g_base_seed) +
                              " opforge-emu-tests --gtest_filter='emu." + c_.name + "'";
    try {
      run_sweep(
          c_, g_base_seed,
          [&] {
            return Executor{&emu::emu_backend().device(), emu::emu_module(*c_.op, warp_)};
          },
          repro);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << repro;
    }
  }

 private:
  SweepCase c_;
  int warp_;
};

int register_tests() {
  int n = 0;
  for (const OpInfo& op : op_table()) {
    if (!op.has_backend("cuda") && !op.has_backend("hip")) continue;
    for (int warp : {32, 64})
      for (const std::string& dtype : op.dtypes)
        for (const EntryInfo& entry : op.entries)
          for (const Shape& shape : op.cases) {
            std::string w = "w";  // (not "w" + to_string: GCC 12 -O3 warns -Wrestrict on it, a false positive)
            w += std::to_string(warp);
            SweepCase c{&op, w, dtype, entry.name, shape, case_name(op.name, w, dtype, entry.name, shape)};
            const std::string name = c.name;
            ::testing::RegisterTest(
                "emu", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                [c = std::move(c), warp]() -> ::testing::Test* { return new EmuSweepTest(c, warp); });
            ++n;
          }
  }
  return n;
}

}  // namespace
}  // namespace opf::suites

int main(int argc, char** argv) {
  using namespace opf::suites;
  ::testing::InitGoogleTest(&argc, argv);
  bool from_env = false;
  g_base_seed = base_seed_from_env(&from_env);
  const int n = register_tests();
  std::printf("opforge GPU emulation sweep: %d cases, base seed %llu (%s; replay with OPFORGE_SEED=%llu)\n", n,
              (unsigned long long)g_base_seed, from_env ? "from OPFORGE_SEED" : "fresh",
              (unsigned long long)g_base_seed);
  return RUN_ALL_TESTS();
}
