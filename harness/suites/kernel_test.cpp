// Correctness suite: every op x enabled backend x dtype x entry x case shape of the registry is
// one GoogleTest test named `kernel.<op>/<backend>/<dtype>/<entry>/<shape>` (the benchmark's name
// with a suite prefix), registered at run time from op_table() — no per-op test code.
// Each test runs every fill variant (case_data.h) with the manifest's default params, and the
// random fill with every other param set of the sweep (param_sweep.h), against the float64
// reference (tolerance.h). A combination the module does not support (abi.h: supports) is
// skipped with its reason, never passed. `threads.<op>/cpu/...` tests check that 1, 2 and 3
// threads give bitwise the same outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "case_data.h"
#include "case_name.h"
#include "opforge/error.h"
#include "opforge/loader.h"
#include "param_sweep.h"
#include "peers/peer.h"
#include "seed.h"
#include "staged_case.h"
#include "sweep.h"
#include "tolerance.h"

namespace opf::suites {
namespace {

uint64_t g_base_seed = 0;
const char* g_argv0 = "opforge-kernel-tests";

using KernelCase = SweepCase;

std::string repro(const KernelCase& c) {
  return "repro: OPFORGE_SEED=" + std::to_string(g_base_seed) + " opforge test --op " + c.op->name + " --backend " +
         c.backend + " --dtype " + c.dtype + "   (or: OPFORGE_SEED=" + std::to_string(g_base_seed) + " " + g_argv0 +
         " --gtest_filter='kernel." + c.name + "')";
}

class KernelTest : public ::testing::Test {
 public:
  explicit KernelTest(KernelCase c) : c_(std::move(c)) {}

  void TestBody() override {
    try {
      Loader& loader = Loader::instance();
      const Availability av = loader.availability(c_.backend);
      if (!av.ok) GTEST_SKIP() << "backend " << c_.backend << " not available here: " << av.reason;
      run_sweep(
          c_, g_base_seed,
          [&] {
            return Executor{&loader.device(c_.backend), loader.load(*c_.op, c_.backend).info};
          },
          repro(c_));
    } catch (const std::exception& e) {  // no module, a run the module refused, a fill that cannot be drawn
      ADD_FAILURE() << e.what() << "\n" << repro(c_);
    }
  }

 private:
  KernelCase c_;
};

// The same case at 1, 2 and 3 CPU threads must give bitwise the same outputs: ops split their
// work into tasks whose boundaries depend on the shape alone (abi.h, cpu/parallel.h). Run on the
// first benchmark shape, large enough to be cut into many tasks.
class ThreadsTest : public ::testing::Test {
 public:
  explicit ThreadsTest(KernelCase c) : c_(std::move(c)) {}

  void TestBody() override {
    try {
      Loader& loader = Loader::instance();
      const DType dtype = *dtype_from_name(c_.dtype);
      const uint64_t seed = test_seed(g_base_seed, "threads/" + c_.name);
      DrawnCase d = draw_case(*c_.op, c_.entry, dtype, c_.shape, Variant::random, seed, false);
      if (!d.desc.unsupported.empty()) GTEST_SKIP() << "case not supported by the op: " << d.desc.unsupported;
      const LoadedModule& m = loader.load(*c_.op, c_.backend);
      std::vector<std::vector<std::byte>> first;
      for (int threads : {1, 2, 3}) {
        StagedCase staged(loader.device(c_.backend), *c_.op, d, threads);
        if (std::string why = staged.supports(m.info); !why.empty()) GTEST_SKIP() << "unsupported: " << why;
        staged.run(m.info);
        staged.synchronize();
        size_t k = 0;
        for (size_t i = 0; i < d.host.size(); ++i) {
          if (d.host[i].desc->role == Role::in) continue;
          std::vector<std::byte> got = staged.fetch(i);
          if (threads == 1) {
            first.push_back(std::move(got));
            continue;
          }
          const std::vector<std::byte>& want = first[k++];
          size_t at = 0;
          while (at < got.size() && got[at] == want[at]) ++at;
          EXPECT_EQ(at, got.size()) << "output '" << d.host[i].desc->name << "' at " << threads
                                    << " threads differs from 1 thread at byte " << at << " (seed " << seed << ")\n"
                                    << repro(c_);
        }
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << repro(c_);
    }
  }

 private:
  KernelCase c_;
};

// A peer library's adapter (peers/) checked against the same reference: the benchmark's "ratio vs
// peer" only means something if the adapter computes the op we benchmark it against. Named
// `peer.<lib>/<op>/<dtype>/<entry>/<shape>`; the peer's own precision is judged with the same
// tolerance as ours.
struct PeerCheck {
  const OpInfo* op;
  const peers::Adapter* peer;
  std::string dtype, entry;
  Shape shape;
  std::string name;  // <lib>/<op>/<dtype>/<entry>/<shape>
};

class PeerTest : public ::testing::Test {
 public:
  explicit PeerTest(PeerCheck c) : c_(std::move(c)) {}

  void TestBody() override {
    const DType dtype = *dtype_from_name(c_.dtype);
    const Params params = c_.op->default_params();
    const peers::PeerCase pc{c_.entry, dtype, c_.shape, params};
    if (std::string why = c_.peer->unsupported(pc); !why.empty()) GTEST_SKIP() << why;
    const std::string repro =
        "repro: OPFORGE_SEED=" + std::to_string(g_base_seed) + " " + g_argv0 + " --gtest_filter='peer." + c_.name + "'";
    try {
      for (Variant v : all_variants()) {
        if (v == Variant::nan) continue;  // a peer is checked for computing the same op, not for NaN semantics
        const std::string vname(variant_name(v));
        SCOPED_TRACE("variant " + vname);
        DrawnCase d = draw_case(*c_.op, c_.entry, dtype, c_.shape, v,
                                test_seed(g_base_seed, "peer/" + c_.name + "/" + vname), true);
        if (!d.desc.unsupported.empty()) GTEST_SKIP() << "case not supported by the op: " << d.desc.unsupported;
        if (!out_of_range(d).empty()) continue;
        auto run = c_.peer->make(pc, d);
        run->run();
        int compared = 0;
        for (size_t i = 0; i < d.host.size(); ++i) {
          const ArgDesc& a = *d.host[i].desc;
          std::vector<double> got;
          if (a.role == Role::in || !run->output(a.name, a.list_index, got)) continue;
          ASSERT_EQ(got.size(), size_t(a.numel())) << "peer output '" << a.name << "' has the wrong size";
          std::vector<std::byte> stored(size_t(a.numel()) * dtype_size(a.dtype));  // as a kernel would store it
          for (int64_t j = 0; j < a.numel(); ++j) store_element(a.dtype, stored.data(), j, got[size_t(j)]);
          const Tolerance tol = tolerance_for(a, d.desc, d.kappa, d.ref[i].v, &d.sensitivity[i], 1.0);
          const Comparison cmp = compare(a, stored.data(), d.ref[i].v, tol);
          RecordProperty(vname + "." + a.name + ".worst_err_ratio", std::to_string(cmp.worst_ratio));
          EXPECT_TRUE(cmp.ok) << cmp.first_bad << "\n" << repro;
          ++compared;
        }
        EXPECT_GT(compared, 0) << "the adapter reports none of the op's outputs";
      }
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << repro;
    }
  }

 private:
  PeerCheck c_;
};

int register_tests() {
  int n = 0;
  for (const OpInfo& op : op_table())
    for (const std::string& backend : op.enabled_backends)
      for (const std::string& dtype : op.dtypes)
        for (const EntryInfo& entry : op.entries) {
          for (const Shape& shape : op.cases) {
            KernelCase c{&op, backend, dtype, entry.name, shape, case_name(op.name, backend, dtype, entry.name, shape)};
            const std::string name = c.name;
            ::testing::RegisterTest("kernel", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                    [c = std::move(c)]() -> ::testing::Test* { return new KernelTest(c); });
            ++n;
          }
          if (backend == "cpu" && !op.bench.empty()) {
            const Shape& shape = op.bench.front();
            KernelCase c{&op, backend, dtype, entry.name, shape, case_name(op.name, backend, dtype, entry.name, shape)};
            const std::string name = c.name;
            ::testing::RegisterTest("threads", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                    [c = std::move(c)]() -> ::testing::Test* { return new ThreadsTest(c); });
            ++n;
          }
        }
  for (const OpInfo& op : op_table())
    for (const std::string& lib : op.peers) {
      const peers::Adapter* a = peers::find_adapter(lib, op.name);
      if (!a) continue;              // not built here (library missing): the benchmark reports it
      if (a->timing_only) continue;  // it does not compute the op (peer.h)
      for (const std::string& dtype : op.dtypes)
        for (const EntryInfo& entry : op.entries)
          for (const Shape& shape : op.cases) {
            PeerCheck c{&op,   a,
                        dtype, entry.name,
                        shape, lib + "/" + op.name + "/" + dtype + "/" + entry.name + "/" + shape_name(shape)};
            const std::string name = c.name;
            ::testing::RegisterTest("peer", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                                    [c = std::move(c)]() -> ::testing::Test* { return new PeerTest(c); });
            ++n;
          }
    }
  return n;
}

void print_loader_stats() {
  const LoaderStats s = Loader::instance().stats();
  std::printf("opforge loader: %d prebuilt loads, %d JIT cache hits, %d compiles, %d lock waits (cache %s)\n",
              s.prebuilt_loads, s.cache_hits, s.compiles, s.lock_waits, cache_root().c_str());
}

}  // namespace
}  // namespace opf::suites

int main(int argc, char** argv) {
  using namespace opf::suites;
  ::testing::InitGoogleTest(&argc, argv);
  g_argv0 = argv[0];
  try {
    bool from_env = false;
    g_base_seed = base_seed_from_env(&from_env);
    for (const opf::OpInfo& op : opf::op_table())
      if (!op.spec) throw opf::Error("op '" + op.name + "' has no OpSpec (ref.cpp)");
    const int n = register_tests();
    std::printf("opforge kernel suite: %d cases, base seed %llu (%s; replay with OPFORGE_SEED=%llu)\n", n,
                (unsigned long long)g_base_seed, from_env ? "from OPFORGE_SEED" : "fresh",
                (unsigned long long)g_base_seed);
  } catch (const opf::Error& e) {
    std::fprintf(stderr, "opforge kernel suite: %s\n", e.what());
    return 2;
  }
  const int rc = RUN_ALL_TESTS();
  print_loader_stats();
  std::printf("opforge kernel suite: base seed %llu\n", (unsigned long long)g_base_seed);
  return rc;
}
