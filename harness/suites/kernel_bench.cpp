// Performance suite: every op x enabled backend x dtype x entry x manifest `bench` shape x thread
// count is one benchmark `<op>/<backend>/<dtype>/<entry>/<shape>/threads:<n>`, registered at run
// time from op_table(), for n = 1 and n = all cores (OPFORGE_NUM_THREADS), each thread count
// beside the bandwidth probe at that count (`probe/stream_triad/threads:<n>`, registered first)
// and the manifest peers (`peer/<lib>/<op>/<dtype>/<entry>/<shape>/threads:<n>`, peers/).
// Counters: bytes_per_second (CaseDesc::bytes: what an ideal kernel must move), FLOP/s
// (CaseDesc::flops) and bw_frac = bytes_per_second / probe bandwidth at the same thread count.
// Real time for host work (threaded kernels and peers), hence the "/real_time" name suffix in JSON.
// GPU benchmarks are timed by the device (events around each call, after a warm-up call; manual
// time, "/manual_time"), rotate through copies of the case's buffers that together exceed the
// device's L2 (a call never finds its inputs in cache), and report bw_frac against
// `probe/device_copy/<backend>` (device_copy_probe.h), measured in the same run.
#include <benchmark/benchmark.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ab_serve.h"
#include "bandwidth_probe.h"
#include "bench_table.h"
#include "device_copy_probe.h"
#include "case_data.h"
#include "case_name.h"
#include "opforge/build_info.h"
#include "opforge/error.h"
#include "opforge/loader.h"
#include "opforge/threads.h"
#include "peer_not_built.h"
#include "peers/peer.h"
#include "peers/peer_check.h"
#include "recycling_device.h"
#include "seed.h"
#include "staged_case.h"

namespace opf::suites {
namespace {

struct BenchCase {
  const OpInfo* op;
  const peers::Adapter* peer;  // null: our module on `backend`
  std::string backend;         // a peer's: its Adapter::backend ("" on the host)
  DType dtype;
  std::string entry;
  Shape shape;
  int threads;
  std::string name;
};

// The case being measured. google-benchmark calls a benchmark function several times while it
// settles the iteration count; staging a case once per benchmark (and freeing the previous one)
// keeps setup out of the timing and memory bounded.
struct Prepared {
  std::string name;
  std::shared_ptr<const DrawnCase> drawn;
  std::unique_ptr<StagedCase> staged;
  const opf_module_info* module = nullptr;
  std::unique_ptr<peers::PeerRun> peer;
  std::string error;
  bool restore = false;              // in-out arguments: restored before every call, untimed
  bool evict_after_restore = false;  // and the caches evicted after that (see beyond_l2)
  // --ab-serve's restage: the stagings not in use, rotated through (see restage)
  std::vector<std::unique_ptr<StagedCase>> parked_staged;
  std::vector<std::unique_ptr<peers::PeerRun>> parked_peer;
  // GPU: more stagings of the case (or instances of a GPU peer), run in turn after the first, so
  // that a call's inputs were last touched more than an L2 of traffic ago
  std::vector<std::unique_ptr<StagedCase>> l2_rotation;
  std::vector<std::unique_ptr<peers::PeerRun>> l2_rotation_peer;
  size_t turn = 0;

  StagedCase& next_staging() {
    const size_t n = 1 + l2_rotation.size(), k = turn++ % n;
    return k == 0 ? *staged : *l2_rotation[k - 1];
  }
  peers::PeerRun& next_peer() {
    const size_t n = 1 + l2_rotation_peer.size(), k = turn++ % n;
    return k == 0 ? *peer : *l2_rotation_peer[k - 1];
  }
};

bool on_gpu(const BenchCase& bc) { return !bc.backend.empty() && bc.backend != "cpu"; }
std::unique_ptr<Prepared> g_current;
int g_failed = 0;  // benchmark runs that ended in SkipWithError
uint64_t g_check_seed = 0;

// A peer is timed only after it computed the op: its adapter is checked against the float64
// reference on the op's correctness shapes, once per (lib, op, dtype, entry), before its first
// benchmark (a peer library linked into this binary only, torch, has no other check). Returns
// why the peer may not be timed; empty when it passed.
std::string cross_check(const BenchCase& bc) {
  static std::map<std::string, std::string> done;
  const std::string key = bc.peer->lib + "/" + bc.op->name + "/" + std::string(dtype_name(bc.dtype)) + "/" + bc.entry;
  if (auto it = done.find(key); it != done.end()) return it->second;
  if (bc.peer->timing_only) {
    std::fprintf(stderr, "opforge bench: peer %s is timed, not cross-checked: %s\n", key.c_str(), bc.peer->timing_only);
    return done[key] = "";
  }
  std::string why;
  int compared = 0, shapes = 0;
  for (const Shape& shape : bc.op->cases) {
    const std::string name = key + "/" + shape_name(shape);
    const peers::CheckOutcome r =
        peers::check_peer(*bc.op, *bc.peer, bc.dtype, bc.entry, shape, bc.threads, g_check_seed, name);
    if (!r.failure.empty()) {
      why = "peer cross-check against the float64 reference failed, " + name + ": " + r.failure +
            " (replay: OPFORGE_SEED=" + std::to_string(g_check_seed) + ")";
      break;
    }
    if (r.unsupported.empty()) ++shapes;
    compared += r.compared;
  }
  if (why.empty() && compared == 0)
    why = "peer not cross-checked: no correctness shape of " + bc.op->name + " runs on it";
  if (why.empty())
    std::fprintf(stderr,
                 "opforge bench: peer %s cross-checked against the float64 reference: %d outputs on %d shapes (seed "
                 "%llu), pass\n",
                 key.c_str(), compared, shapes, (unsigned long long)g_check_seed);
  return done[key] = why;
}

// The devices cases are staged on, by backend, recycling the blocks of the previous staging.
// Never destroyed: g_current's staging frees into its device at exit.
std::map<std::string, std::unique_ptr<RecyclingDevice>>& bench_devices() {
  static auto& devices = *new std::map<std::string, std::unique_ptr<RecyclingDevice>>;
  return devices;
}

RecyclingDevice& bench_device(const std::string& backend) {
  auto& d = bench_devices()[backend];
  if (!d) d = std::make_unique<RecyclingDevice>(Loader::instance().device(backend), backend == "cpu");
  return *d;
}

// The inputs of one (op, dtype, entry, shape), drawn once and shared by our module and every
// peer at every thread count, which are registered one after another: all of them time the same
// data, and a 100 MB case is drawn once instead of 2 x (1 + peers) times (one op's 56
// benchmarks: 77 s -> 63 s). Seeded by that key: timings should not depend on the run's seed.
std::shared_ptr<const DrawnCase> shared_draw(const BenchCase& bc) {
  static std::string key;
  static std::shared_ptr<const DrawnCase> drawn;
  const std::string k = case_name(bc.op->name, "", dtype_name(bc.dtype), bc.entry, bc.shape);
  if (k == key && drawn) return drawn;
  drawn.reset();  // free the previous inputs and stagings before drawing the next
  for (auto& [backend, device] : bench_devices()) device->trim();
  key = k;
  drawn = std::make_shared<const DrawnCase>(
      draw_case(*bc.op, bc.entry, bc.dtype, bc.shape, Variant::random, fnv1a(k), false));
  return drawn;
}

// Stagings of a GPU case (instances of a GPU peer) until all of them together hold twice the
// device's L2 (at most 64).
void add_l2_rotation(Prepared& p, const BenchCase& bc) {
  const double l2 = double(Loader::instance().device(bc.backend).cache_bytes()), bytes = p.drawn->desc.bytes;
  if (l2 <= 0 || bytes <= 0) return;
  const size_t want = std::min<size_t>(64, size_t(std::ceil(2 * l2 / bytes)));
  const Params params = bc.op->default_params();
  while (bc.peer && 1 + p.l2_rotation_peer.size() < want) {
    p.l2_rotation_peer.push_back(bc.peer->make({bc.entry, bc.dtype, bc.shape, params, bc.threads}, *p.drawn));
    p.l2_rotation_peer.back()->run();  // warm-up of this instance too
  }
  while (!bc.peer && 1 + p.l2_rotation.size() < want) {
    auto s = std::make_unique<StagedCase>(bench_device(bc.backend), *bc.op, *p.drawn, bc.threads);
    s->run(p.module);
    s->synchronize();
    p.l2_rotation.push_back(std::move(s));
  }
}

// Restoring a case's in-out arguments leaves them in cache. Beyond the core's L2 that would let
// the kernel beat what a repeated call meets, so the caches are evicted after the restore. A case
// that fits in L2 stays there between repeated calls anyway, as every case without in-out
// arguments does: evicting it timed a cold call instead, tens of DRAM and page-walk misses on
// code and data whose latency follows where this process's pages happen to lie (A/A of syncbn
// welford_parallel, a 5 us call: 0.8-1.35x from one pair of processes to the next).
bool beyond_l2(size_t bytes) {
  static const size_t l2 = [] {
    const long v = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return v > 0 ? size_t(v) : size_t(256) << 10;
  }();
  return bytes > l2;
}

Prepared& prepare(const BenchCase& bc) {
  if (g_current && g_current->name == bc.name) return *g_current;
  g_current.reset();  // free the previous case first
  auto p = std::make_unique<Prepared>();
  p->name = bc.name;
  try {
    p->drawn = shared_draw(bc);
    if (!p->drawn->desc.unsupported.empty()) throw Error("case not supported: " + p->drawn->desc.unsupported);
    const Params params = bc.op->default_params();
    if (bc.peer) {
      if (std::string why = cross_check(bc); !why.empty()) throw Error(why);
      p->peer = bc.peer->make({bc.entry, bc.dtype, bc.shape, params, bc.threads}, *p->drawn);
      p->peer->run();  // warm-up: first touch of outputs, lazy init
      if (on_gpu(bc)) add_l2_rotation(*p, bc);
    } else {
      Loader& loader = Loader::instance();
      p->module = loader.load(*bc.op, bc.backend).info;
      p->staged = std::make_unique<StagedCase>(bench_device(bc.backend), *bc.op, *p->drawn, bc.threads);
      if (std::string why = p->staged->supports(p->module); !why.empty()) throw Error("unsupported: " + why);
      p->staged->run(p->module);
      p->staged->synchronize();
      p->restore = p->staged->has_inouts();
      p->evict_after_restore = p->restore && beyond_l2(host_bytes(*p->drawn));
      if (on_gpu(bc)) add_l2_rotation(*p, bc);
    }
  } catch (const std::exception& e) {
    p->error = e.what();
    p->staged.reset();
    p->l2_rotation.clear();
    p->l2_rotation_peer.clear();
    p->peer.reset();
  }
  g_current = std::move(p);
  return *g_current;
}

// Reads 64 MiB, one load per cache line: after an inout restore, the restored tensor's tail would
// otherwise sit in cache and the kernel would beat memory bandwidth. A fixed size: a VM reports
// its host's L3 (260-508 MiB on this project's), not the share it gets.
void evict_caches() {
  static std::vector<uint64_t> junk(size_t(64) << 20 >> 3, 1);
  uint64_t sum = 0;
  for (size_t i = 0; i < junk.size(); i += 8) sum += junk[i];  // one load per cache line
  benchmark::DoNotOptimize(sum);
}

void bench_case(benchmark::State& st, const BenchCase& bc) {
  Prepared& p = prepare(bc);
  if (!p.error.empty()) {
    ++g_failed;
    st.SkipWithError(p.error.c_str());
    return;
  }
  const bool gpu = on_gpu(bc);
  try {
    for (auto _ : st) {
      if (gpu && p.peer) {  // manual time: the device's own, for this call only
        peers::PeerRun& r = p.next_peer();
        st.SetIterationTime(Loader::instance().device(bc.backend).time([&] { r.enqueue(); }));
        continue;
      }
      if (gpu) {
        StagedCase& s = p.next_staging();
        if (p.restore) s.restore_inouts();
        st.SetIterationTime(bench_device(bc.backend).time([&] { s.run(p.module); }));
        continue;
      }
      if (p.restore) {  // an inout kernel would otherwise feed on its own output
        st.PauseTiming();
        p.staged->restore_inouts();
        if (p.evict_after_restore) evict_caches();
        st.ResumeTiming();
      }
      if (p.peer) {
        p.peer->run();
      } else {
        p.staged->run(p.module);
        p.staged->synchronize();
      }
    }
  } catch (const std::exception& e) {
    ++g_failed;
    st.SkipWithError(e.what());
    return;
  }
  const CaseDesc& c = p.drawn->desc;
  st.SetBytesProcessed(int64_t(c.bytes) * int64_t(st.iterations()));
  // no FLOP/s for a case without arithmetic (e.g. a mask draw): the aggregates' cv of an all-zero
  // counter is 0/0, which google-benchmark writes as a bare NaN, and that is not JSON
  if (c.flops > 0) st.counters["FLOP/s"] = benchmark::Counter(c.flops, benchmark::Counter::kIsIterationInvariantRate);
  const double probe = gpu ? device_probe_bandwidth(bc.backend) : probe_bandwidth(bc.threads);
  st.counters["bw_frac"] = benchmark::Counter(c.bytes / probe, benchmark::Counter::kIsIterationInvariantRate);
  st.counters["threads"] = bc.threads;
  if (p.module && p.module->isa) st.SetLabel(p.module->isa);
}

// Every registered case by name, in registration order, for --ab-serve.
std::vector<std::string> g_case_order;
std::map<std::string, BenchCase> g_cases;

void add(BenchCase bc) {
  const std::string name = bc.name;
  g_case_order.push_back(name);
  g_cases.emplace(name, bc);
  const bool gpu = on_gpu(bc);
  auto* b =
      benchmark::RegisterBenchmark(name.c_str(), [bc = std::move(bc)](benchmark::State& st) { bench_case(st, bc); });
  (gpu ? b->UseManualTime() : b->UseRealTime())->Unit(benchmark::kMillisecond);
}

// Cases that cannot run here, grouped by reason so an absent GPU is one line, not sixty.
class NotRun {
 public:
  void add(const std::string& reason, const std::string& name) {
    auto [it, fresh] = by_reason_.try_emplace(reason);
    if (fresh) order_.push_back(reason);
    it->second.push_back(name);
  }
  // One line per reason, on stderr and in the JSON's context (`opforge_not_run`), where the
  // run report shows it.
  void print() const {
    std::string lines;
    for (const std::string& r : order_) {
      const auto& names = by_reason_.at(r);
      char head[64];
      std::snprintf(head, sizeof head, "%zu not run (", names.size());
      lines += head + names.front() + (names.size() > 1 ? ", ..." : "") + "): " + r + "\n";
    }
    for (size_t a = 0, b; a < lines.size(); a = b + 1) {
      b = lines.find('\n', a);
      std::fprintf(stderr, "opforge bench: %s\n", lines.substr(a, b - a).c_str());
    }
    if (!lines.empty()) benchmark::AddCustomContext("opforge_not_run", lines);
  }

 private:
  std::vector<std::string> order_;
  std::map<std::string, std::vector<std::string>> by_reason_;
};

// Why a manifest peer has no adapter in this binary: its library was not built here (the reason
// Meson recorded), else the op has no kernels/ops/<op>/peer_<lib>.cpp.
std::string peer_not_built(const std::string& lib, const std::string& op) {
  static const std::pair<std::string_view, std::string_view> kNotBuilt[] = {OPF_PEERS_NOT_BUILT{"", ""}};
  for (const auto& [l, why] : kNotBuilt)
    if (l == lib) return "peer " + lib + " skipped: " + std::string(why);
  return "peer " + lib + " skipped: no adapter, kernels/ops/" + op + "/peer_" + lib + ".cpp missing";
}

// 1 and all cores (OPFORGE_NUM_THREADS); one count where they are the same.
std::vector<int> thread_counts() {
  const int all = default_num_threads();
  return all > 1 ? std::vector<int>{1, all} : std::vector<int>{1};
}

void register_cases() {
  Loader& loader = Loader::instance();
  NotRun not_run;
  std::set<std::string> gpu_backends;  // each with its copy probe, registered before its kernels
  for (const OpInfo& op : op_table())
    for (const std::string& b : op.enabled_backends)
      if (b != "cpu" && loader.availability(b).ok && gpu_backends.insert(b).second) register_device_probe(b);
  for (const OpInfo& op : op_table()) {
    for (const std::string& dt : op.dtypes) {
      const DType dtype = *dtype_from_name(dt);
      for (const EntryInfo& e : op.entries)
        for (const Shape& shape : op.bench)
          for (int threads : thread_counts()) {
            const std::string suffix = "/threads:" + std::to_string(threads);
            for (const std::string& backend : op.enabled_backends) {
              if (backend != "cpu" && threads != 1) continue;  // GPU work has no host thread count
              const std::string name = case_name(op.name, backend, dt, e.name, shape) + suffix;
              if (const Availability av = loader.availability(backend); !av.ok) {
                not_run.add("backend " + backend + " not available here: " + av.reason, name);
                continue;
              }
              add({&op, nullptr, backend, dtype, e.name, shape, threads, name});
            }
            for (const std::string& lib : op.peers) {
              const std::string name = peer_case_name(lib, op.name, dt, e.name, shape) + suffix;
              const peers::Adapter* a = peers::find_adapter(lib, op.name);
              if (!a) {
                not_run.add(peer_not_built(lib, op.name), name);
                continue;
              }
              if (!a->backend.empty() && threads != 1) continue;  // GPU peers: no host thread count
              if (!a->backend.empty())
                if (const Availability av = loader.availability(a->backend); !av.ok) {
                  not_run.add("peer " + lib + ": backend " + a->backend + " not available here: " + av.reason, name);
                  continue;
                }
              const Params params = op.default_params();
              if (std::string why = a->unsupported({e.name, dtype, shape, params, threads}); !why.empty()) {
                not_run.add(lib + " " + dt + ": " + why, name);
                continue;
              }
              add({&op, a, a->backend, dtype, e.name, shape, threads, name});
            }
          }
    }
  }
  not_run.print();
}

// --ab-serve: the same staging and call as bench_case, timed in blocks the driver asks for. A
// block answers with the median call: a call the scheduler preempted does not move it.
// OPFORGE_AB_SLOWDOWN="<regex>=<fraction>" (calibration of `opforge ab` only: a known slowdown
// without patching a kernel) spins that fraction of each measured call after it, inside the timing;
// with OPFORGE_AB_SLOWDOWN_PAIR=k only in ab's k-th pair of processes.
struct Slowdown {
  std::regex match;
  double fraction = 0;
};
const Slowdown* slowdown() {
  static const std::unique_ptr<Slowdown> s = []() -> std::unique_ptr<Slowdown> {
    const char* env = std::getenv("OPFORGE_AB_SLOWDOWN");
    if (!env || !*env) return nullptr;
    // OPFORGE_AB_SLOWDOWN_PAIR=k: only in the k-th pair of processes `opforge ab` starts
    // (OPFORGE_AB_PAIR), i.e. a bias of one process, which ab's confirmation must not keep
    if (const char* only = std::getenv("OPFORGE_AB_SLOWDOWN_PAIR"); only && *only) {
      const char* pair = std::getenv("OPFORGE_AB_PAIR");
      if (!pair || std::string_view(pair) != only) return nullptr;
    }
    const std::string v = env;
    const size_t eq = v.rfind('=');
    char* end = nullptr;
    const double f = eq == std::string::npos ? 0 : std::strtod(v.c_str() + eq + 1, &end);
    if (eq == std::string::npos || !(f > 0 && f < 10) || *end)
      throw Error("OPFORGE_AB_SLOWDOWN: expected '<regex>=<fraction in (0, 10)>', got '" + v + "'");
    return std::make_unique<Slowdown>(Slowdown{std::regex(v.substr(0, eq)), f});
  }();
  return s.get();
}

// A block of ours runs its calling thread on the last CPU this process may use, in both builds'
// processes, and the pool's workers one each on the others (pin_workers, set by serve): left to
// the scheduler, each process tends to keep the core it last ran on, and two cores of a VM differ
// (their neighbours on the host), a bias between the processes that pairing cannot remove; an op
// that runs serially at any thread count (syncbn welford_parallel) read 0.60-1.58x itself at
// 2 threads, and a woken worker sharing its caller's core waited out the caller's spin. A peer's
// multi-threaded block is left free: its library's own threads would inherit the one CPU.
class OnOneCpu {
 public:
  explicit OnOneCpu(bool want) {
    if (!want || sched_getaffinity(0, sizeof all_, &all_) != 0) return;
    for (int c = CPU_SETSIZE - 1; c >= 0; --c)
      if (CPU_ISSET(c, &all_)) {
        cpu_set_t one;
        CPU_ZERO(&one);
        CPU_SET(c, &one);
        pinned_ = sched_setaffinity(0, sizeof one, &one) == 0;  // this thread only
        break;
      }
  }
  ~OnOneCpu() {
    if (pinned_) sched_setaffinity(0, sizeof all_, &all_);
  }
  OnOneCpu(const OnOneCpu&) = delete;
  OnOneCpu& operator=(const OnOneCpu&) = delete;

 private:
  cpu_set_t all_;
  bool pinned_ = false;
};

// Other buffers for the staged case (same data): which physical pages a case's buffers land on
// (cache sets, DRAM banks) is fixed for a process's lifetime and can make one process slower
// than another running the same code, a bias no amount of pairing removes. Rotating through
// several stagings, one per round, turns it into noise the median absorbs. A large case gets
// three: more would cost a staging's page faults every round (~0.4 s per 100 MB on this
// project's VMs). A small case gets one per round (up to kMaxStagings, kStagingBytes in all):
// its time depends on placement the most, and three stagings repeated over ten rounds were one
// per-process draw of three placements, not ten. On a VM the host backs guest memory with pages
// whose placement the guest cannot see or choose; syncbn f32 8x64x784 at 2 threads (1.6 MB a
// core, a core's L2 is 2 MiB) ran 0.5-1.9x from one staging to the next, and A/A runs called it
// SLOWER or FASTER in 3 of 20 runs of one pair of processes each.
constexpr size_t kMinStagings = 3, kMaxStagings = 11, kStagingBytes = size_t(48) << 20;

size_t stagings_for(size_t case_bytes) {
  return std::clamp<size_t>(kStagingBytes / std::max<size_t>(case_bytes, 1), kMinStagings, kMaxStagings);
}

template <class T, class Make>
void rotate(std::unique_ptr<T>& active, std::vector<std::unique_ptr<T>>& parked, size_t stagings, Make&& make) {
  parked.push_back(std::move(active));
  if (parked.size() < stagings) {
    active = make();
  } else {
    active = std::move(parked.front());
    parked.erase(parked.begin());
  }
}

std::string restage(const BenchCase& bc) {
  Prepared& p = prepare(bc);
  if (!p.error.empty()) return p.error;
  const size_t stagings = stagings_for(host_bytes(*p.drawn));
  try {
    if (p.peer) {
      rotate(p.peer, p.parked_peer, stagings, [&] {
        auto r = bc.peer->make({bc.entry, bc.dtype, bc.shape, bc.op->default_params(), bc.threads}, *p.drawn);
        r->run();  // first touch
        return r;
      });
    } else {
      rotate(p.staged, p.parked_staged, stagings, [&] {
        auto r = std::make_unique<StagedCase>(bench_device(bc.backend), *bc.op, *p.drawn, bc.threads);
        r->run(p.module);  // first touch
        r->synchronize();
        return r;
      });
    }
  } catch (const std::exception& e) {
    p.error = e.what();
  }
  return p.error;
}

double time_block(const BenchCase& bc, double seconds, int64_t& calls) {
  using clock = std::chrono::steady_clock;
  const OnOneCpu pin(!bc.peer || bc.threads == 1);
  Prepared& p = prepare(bc);
  if (!p.error.empty()) throw Error(p.error);
  const Slowdown* slow = slowdown();
  const double spin = slow && std::regex_search(bc.name, slow->match) ? slow->fraction : 0;
  double timed = 0;
  std::vector<double> each;
  // An op with in-out arguments restores them before every call, untimed, and beyond L2 evicts
  // the caches (64 MiB of loads): next to a call of a few milliseconds that is several times the
  // call, and a block of `seconds` timed would take many times that in wall time. Such a block
  // also ends at 4x `seconds` of wall time, with dozens of calls for its median still.
  const auto wall_end = clock::now() + std::chrono::duration<double>(4 * seconds);
  for (calls = 0; calls == 0 || (timed < seconds && !(p.restore && clock::now() > wall_end)); ++calls) {
    if (p.restore) {
      p.staged->restore_inouts();
      if (p.evict_after_restore) evict_caches();
    }
    const auto t0 = clock::now();
    if (p.peer) {
      p.peer->run();
    } else {
      p.staged->run(p.module);
      p.staged->synchronize();
    }
    auto t1 = clock::now();
    if (spin > 0)
      for (const auto until = t1 + (t1 - t0) * spin; (t1 = clock::now()) < until;) {
      }
    each.push_back(std::chrono::duration<double>(t1 - t0).count());
    timed += each.back();
  }
  return median_ns(each);
}

int serve(const std::vector<int>& thread_counts) {
  if (cpu_set_t all; sched_getaffinity(0, sizeof all, &all) == 0) {  // see OnOneCpu
    std::vector<int> others;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &all)) others.push_back(c);
    if (others.size() > 1) others.pop_back();  // the last is the calling thread's
    opf::pin_workers(others);
  }
  ServeTarget t;
  t.list = [&] {
    std::vector<std::string> names;
    for (int n : thread_counts) names.push_back(probe_name(n));
    names.insert(names.end(), g_case_order.begin(), g_case_order.end());
    return names;
  };
  auto probe_threads = [&](const std::string& name) {
    for (int n : thread_counts)
      if (name == probe_name(n)) return n;
    return 0;
  };
  auto find = [](const std::string& name) -> const BenchCase& {
    auto it = g_cases.find(name);
    if (it == g_cases.end()) throw Error("no benchmark '" + name + "' in this build");
    return it->second;
  };
  t.prepare = [&](const std::string& name) -> std::string {
    if (int n = probe_threads(name)) return prepare_probe(n), "";
    return prepare(find(name)).error;
  };
  t.restage = [&](const std::string& name) -> std::string {
    if (int n = probe_threads(name)) return restage_probe(n), "";
    return restage(find(name));
  };
  t.time = [&](const std::string& name, double seconds, int64_t& calls) {
    if (int n = probe_threads(name)) {
      const OnOneCpu pin(true);
      return time_probe(n, seconds, calls);
    }
    return time_block(find(name), seconds, calls);
  };
  return serve_ab(stdin, stdout, t);
}

// Large blocks on transparent huge pages, for every contender in this process alike (ours, the
// peers, the probe): each benchmark stages its case and each peer allocates its own, and on this
// project's VMs first-touching 100 MB in 4 KiB pages cost more than the timed loops (one op:
// 58 s -> 32 s for its 56 benchmarks, medians within run-to-run noise). glibc (2.35+) reads
// its tunables at startup only, so the process re-executes itself once with the tunable added;
// a GLIBC_TUNABLES that already names glibc.malloc.hugetlb (e.g. =0) is respected.
void ensure_huge_page_malloc(char** argv) {
  if (std::getenv("OPFORGE_BENCH_REEXEC")) {  // this is the re-executed process
    ::unsetenv("OPFORGE_BENCH_REEXEC");
    return;
  }
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string have = tunables ? tunables : "";
  if (have.find("glibc.malloc.hugetlb") != std::string::npos) return;
  const std::string want = have.empty() ? "glibc.malloc.hugetlb=1" : have + ":glibc.malloc.hugetlb=1";
  ::setenv("GLIBC_TUNABLES", want.c_str(), 1);
  ::setenv("OPFORGE_BENCH_REEXEC", "1", 1);  // never twice, whatever glibc does with the tunable
  ::execv("/proc/self/exe", argv);
  ::unsetenv("OPFORGE_BENCH_REEXEC");  // exec failed: run as we are, the context says so
  if (tunables) ::setenv("GLIBC_TUNABLES", tunables, 1);
  else ::unsetenv("GLIBC_TUNABLES");
}

// How large blocks are backed, for the JSON's context.
std::string malloc_setting() {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  std::string thp = "unknown";
  if (std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof line, f)) thp = line;
    std::fclose(f);
    while (!thp.empty() && (thp.back() == '\n' || thp.back() == ' ')) thp.pop_back();
  }
  return std::string("GLIBC_TUNABLES=") + (tunables ? tunables : "(unset)") + "; transparent_hugepage: " + thp;
}

}  // namespace
}  // namespace opf::suites

int main(int argc, char** argv) {
  using namespace opf::suites;
  ensure_huge_page_malloc(argv);
  // The summary table rides on the console reporter; --benchmark_format=json|csv keeps stdout pure.
  bool console = true, ab_serve = false;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view a = argv[i]; a.rfind("--benchmark_format=", 0) == 0) console = a.substr(19) == "console";
    if (std::string_view(argv[i]) == "--ab-serve") ab_serve = true;  // ours, not google-benchmark's
    else argv[kept++] = argv[i];
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  try {
    benchmark::AddCustomContext("opforge_version", opf::build::version());
    benchmark::AddCustomContext("opforge_mode", opf::build::mode());
    benchmark::AddCustomContext(
        "opforge_probe",
        "STREAM triad, 3 x 64 MiB, at each benchmark's thread count; bw_frac = bytes_per_second / its mean rate");
    benchmark::AddCustomContext("opforge_threads", std::to_string(opf::default_num_threads()));
    benchmark::AddCustomContext("opforge_malloc", malloc_setting());
    g_check_seed = base_seed_from_env();
    for (int threads : thread_counts()) register_bandwidth_probe(threads);
    register_cases();
    if (ab_serve) return serve(thread_counts());
  } catch (const opf::Error& e) {
    std::fprintf(stderr, "opforge bench: %s\n", e.what());
    return 2;
  }
  TableReporter table;
  benchmark::RunSpecifiedBenchmarks(console ? &table : nullptr);
  if (console) table.print_table(stdout);
  const opf::LoaderStats ls = opf::Loader::instance().stats();
  std::fprintf(console ? stdout : stderr,
               "opforge loader: %d prebuilt loads, %d JIT cache hits, %d compiles (outside the timed loops)\n",
               ls.prebuilt_loads, ls.cache_hits, ls.compiles);
  benchmark::Shutdown();
  // A benchmark that could not run (module failed to load or run) fails `meson test --benchmark`
  // and keeps `opforge bench` from filing the results.
  if (g_failed > 0) {
    std::fprintf(stderr, "opforge bench: some benchmarks failed (see the table)\n");
    return 1;
  }
  return 0;
}
