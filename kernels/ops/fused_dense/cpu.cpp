// fused_dense — CPU module (contract: ref.cpp). The GEMMs are oneDNN matmul primitives; what this
// module adds is the epilogue: bias, GELU / GELU' and the bias gradient are applied to each
// output tile while it is still in cache from the GEMM that produced it, one pass, instead of
// the separate passes over the whole output that a GEMM + elementwise library call sequence makes.
//
// Why oneDNN and not OpenBLAS: Debian 12's OpenBLAS (0.3.21) runs its Haswell (AVX2) sgemm on
// AVX-512 CPUs it does not know (Zen 4/5 among them): ~90 GFLOP/s a core here, where oneDNN's
// brgemm matmul (avx512_core) does ~175 on the same 512-row tiles (measured single-threaded).
//
// Threads and determinism: every GEMM's output is cut into tiles of rows x columns (M and N only,
// never K: each output element is one matmul's dot product over the whole K, in oneDNN's own
// order); the tile sizes come from the shape and the tune constants alone, and each tile is one
// task on the caller's thread pool, running a matmul at one OpenMP thread (oneDNN's runtime;
// the caller's OpenMP setting is restored after each call). A primitive is created at one thread
// too, so its blocking does not depend on the thread count either: a threaded matmul would split
// a call by its thread count, which would change the order each element is summed in, and so the
// bits. Column sums (bias gradients) add f32 partials of reduce_rows rows in f64, in tile order.
// Same bits for any OPFORGE_NUM_THREADS.
// Tile size: every matmul call packs its own panel of B (K x tile_n), so the whole GEMM packs B
// M/tile_m times where one big call packs it once: large tiles (512 x 512, 1 MiB of f32 output,
// about L2) keep that near the cost of one call; the epilogue of a tile then reads it from
// L2/L3, still one pass instead of a trip through memory.
// f16/bf16: each operand is widened to f32 once per call (exact) and the matmul runs on that; the
// epilogue computes in f32 and rounds to T once per output.
// Arithmetic as written: no implicit a*b+c -> fma contraction in the epilogue, so that every
// target and the JIT round the same expressions; first line of the TU on purpose.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif
#ifndef OPF_TUNE_TILE_M
#define OPF_TUNE_TILE_M 512  // most output rows per tile
#endif
#ifndef OPF_TUNE_TILE_N
#define OPF_TUNE_TILE_N 512  // most output columns per tile
#endif
#ifndef OPF_TUNE_REDUCE_ROWS
#define OPF_TUNE_REDUCE_ROWS 32  // rows per f32 partial of a bias gradient before it is added in f64
#endif
#ifndef OPF_FUSED_DENSE_CPU_COMMON
#define OPF_FUSED_DENSE_CPU_COMMON
#include <algorithm>
#include <cmath>
#include <compare>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "cpu/args.h"
#include "cpu/dispatch.h"
#include "cpu/parallel.h"
#include "cpu/scratch.h"
#include "cpu/storage.h"
#include "opforge/module.h"

namespace opf::fused_dense_cpu {
// A row-major f32 matrix as a GEMM operand: op(M) = M, or Mᵀ when trans.
struct Mat {
  const float* p;
  int64_t ld;
  bool trans;
};

// One tile shape's GEMM: op(A) [m, k] (leading dimension lda) times op(B) [k, n] (ldb) into a
// dense [m, n] tile.
struct GemmShape {
  int64_t m, n, k, lda, ldb;
  bool ta, tb;
  auto operator<=>(const GemmShape&) const = default;
};

// The GEMMs as a CPU JIT kernels module reaches them: the oneDNN plumbing below (the matmul cache,
// per-thread streams, the OpenMP guard) is host code there, compiled once per op in the JIT's host
// module rather than in every pair's kernels module (it was a third of one's compile). Every other
// module (prebuilt, unsplit, the host module itself) calls it directly (GemmPrepare / GemmRun below).
struct GemmApi {
  void (*prepare)(const GemmShape& s);  // the shape's matmul, made now (on the calling thread)
  void (*tile)(const Mat& A, const Mat& B, int64_t k, int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* tile);
};

// Every entry's arguments (unused ones null). Shapes: x [b, in], weight1 [hid, in],
// weight2 [out, hid]; linear_bias uses weight1/bias1 as its weight/bias and y as [b, hid].
struct Dense {
  const opf_host* host;
  int32_t dtype;
  int64_t b, in, hid, out;
  const void *x, *w1, *b1, *w2, *b2, *dy, *h, *a;
  void *y, *a_out, *h_out, *dx, *dw1, *db1, *dw2, *db2;
  const GemmApi* gemm;  // a CPU JIT host module's GEMMs (null elsewhere)
};

// Per thread and slot (cpu/scratch.h): dH alone is 32 MiB at 2048 x 4096, and a fresh buffer per call
// cost more in first-touch page faults than the whole GELU' epilogue. Pool threads use the first three
// slots (their tile, its GEMM's scratchpad, a bias gradient's f32 partial); the calling thread the others.
enum Slot { kTile, kGemm, kPart, kDh, kAct, kX, kW1, kW2, kDy, kA, kSlots };
inline float* Scratch(Slot slot, size_t n) { return opf::cpu::thread_scratch<Slot, kSlots>(n, slot); }
}  // namespace opf::fused_dense_cpu

#ifndef OPF_JIT_KERNELS  // the oneDNN plumbing: host code in a split CPU JIT (GemmApi)
// oneDNN's C API, not dnnl.hpp: the C++ header and the std::map / std::unordered_map it was used
// with were most of a cold JIT compile of this module (one entry's: 2.1 s, of it ~1 s parsing
// and instantiating them; the C header parses in ~0.03 s).
#include <oneapi/dnnl/dnnl.h>

// OpenMP's API, declared rather than #include <omp.h>: that header is the compiler's own (clang
// finds none without libomp-dev, and the CPU JIT may be clang), and libgomp (the manifest's deps)
// defines these two (nothrow, as omp.h declares them).
extern "C" int omp_get_max_threads() noexcept;
extern "C" void omp_set_num_threads(int) noexcept;

namespace opf::fused_dense_cpu {
// OpenMP (oneDNN's threading runtime) at one thread on this thread while in scope; the caller's
// setting comes back after (nthreads-var is per thread: other threads are not affected).
class OneOmpThread {
 public:
  OneOmpThread() : prev_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneOmpThread() { omp_set_num_threads(prev_); }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  int prev_;
};

// A failed oneDNN call fails the op's call with its name and status (dnnl_status_t).
inline void Check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success) module::fail("fused_dense: oneDNN %s failed (dnnl_status_t %lld)", what, status);
}

inline dnnl_engine_t Engine() {
  static const dnnl_engine_t engine = [] {
    dnnl_engine_t e = nullptr;
    Check(dnnl_engine_create(&e, dnnl_cpu, 0), "dnnl_engine_create");
    return e;
  }();
  return engine;
}

// The matmul for a tile shape, created once per process (creation JIT-compiles kernels: ms).
// The scratchpad is the caller's (user mode): the library's shared one is not safe when
// primitives run concurrently, as the tiles do.
struct Gemm {
  dnnl_memory_desc_t a{}, b{}, c{}, scratch{};
  dnnl_primitive_t matmul = nullptr;
  size_t scratch_bytes = 0;
  Gemm() = default;
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;
  ~Gemm() {
    if (matmul) dnnl_primitive_destroy(matmul);
  }
};

inline std::shared_ptr<const Gemm> MakeGemm(const GemmShape& s) {
  auto g = std::make_shared<Gemm>();
  // strides in elements: op(A) row i, column p is at i*lda + p, or at p*lda + i when transposed
  const dnnl_dims_t a_dims{s.m, s.k}, a_strides{s.ta ? 1 : s.lda, s.ta ? s.lda : 1};
  const dnnl_dims_t b_dims{s.k, s.n}, b_strides{s.tb ? 1 : s.ldb, s.tb ? s.ldb : 1};
  const dnnl_dims_t c_dims{s.m, s.n}, c_strides{s.n, 1};
  Check(dnnl_memory_desc_init_by_strides(&g->a, 2, a_dims, dnnl_f32, a_strides), "dnnl_memory_desc_init_by_strides");
  Check(dnnl_memory_desc_init_by_strides(&g->b, 2, b_dims, dnnl_f32, b_strides), "dnnl_memory_desc_init_by_strides");
  Check(dnnl_memory_desc_init_by_strides(&g->c, 2, c_dims, dnnl_f32, c_strides), "dnnl_memory_desc_init_by_strides");
  dnnl_matmul_desc_t desc;
  Check(dnnl_matmul_desc_init(&desc, &g->a, &g->b, nullptr, &g->c), "dnnl_matmul_desc_init");
  dnnl_primitive_attr_t attr = nullptr;
  Check(dnnl_primitive_attr_create(&attr), "dnnl_primitive_attr_create");
  dnnl_primitive_desc_t pd = nullptr;
  dnnl_status_t st = dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  if (st == dnnl_success) {
    const OneOmpThread one;
    st = dnnl_primitive_desc_create(&pd, &desc, attr, Engine(), nullptr);
  }
  dnnl_primitive_attr_destroy(attr);
  Check(st, "matmul primitive descriptor creation");
  const dnnl_memory_desc_t* scratch = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
  g->scratch_bytes = scratch ? dnnl_memory_desc_get_size(scratch) : 0;
  const dnnl_dims_t s_dims{dnnl_dim_t(g->scratch_bytes)}, s_strides{1};
  if (g->scratch_bytes > 0) st = dnnl_memory_desc_init_by_strides(&g->scratch, 1, s_dims, dnnl_u8, s_strides);
  if (st == dnnl_success) {
    const OneOmpThread one;
    st = dnnl_primitive_create(&g->matmul, pd);
  }
  dnnl_primitive_desc_destroy(pd);
  Check(st, "matmul primitive creation");
  return g;
}

// A process sees few tile shapes: a short list, searched in order, is the cache.
inline std::shared_ptr<const Gemm> GemmFor(const GemmShape& s) {
  static std::mutex mu;
  static std::vector<std::pair<GemmShape, std::shared_ptr<const Gemm>>> cache;
  const std::lock_guard<std::mutex> lock(mu);
  for (const auto& [shape, gemm] : cache)
    if (shape == s) return gemm;
  // a process that sees many shapes: keep the working set bounded (calls in flight hold their own
  // references)
  if (cache.size() >= 256) cache.clear();
  auto g = MakeGemm(s);
  cache.emplace_back(s, g);
  return g;
}

// This thread's oneDNN stream, destroyed with the thread.
class ThreadStream {
 public:
  ThreadStream() { Check(dnnl_stream_create(&stream_, Engine(), dnnl_stream_default_flags), "dnnl_stream_create"); }
  ~ThreadStream() { dnnl_stream_destroy(stream_); }
  ThreadStream(const ThreadStream&) = delete;
  ThreadStream& operator=(const ThreadStream&) = delete;
  dnnl_stream_t get() const { return stream_; }

 private:
  dnnl_stream_t stream_ = nullptr;
};

// tile[i1 - i0, j1 - j0] = rows [i0, i1) of op(A) [m, k] times columns [j0, j1) of op(B) [k, n].
inline void GemmTile(const Mat& A, const Mat& B, int64_t k, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                     float* tile) {
  const int64_t m = i1 - i0, n = j1 - j0;
  if (k == 0) {  // an empty sum
    std::fill(tile, tile + m * n, 0.0f);
    return;
  }
  const auto g = GemmFor({m, n, k, A.ld, B.ld, A.trans, B.trans});
  const float* a = A.trans ? A.p + i0 : A.p + i0 * A.ld;
  const float* b = B.trans ? B.p + j0 * B.ld : B.p + j0;
  thread_local const ThreadStream stream;
  // the memory objects wrap the caller's buffers for this one execution
  dnnl_exec_arg_t args[4] = {
      {DNNL_ARG_SRC, nullptr}, {DNNL_ARG_WEIGHTS, nullptr}, {DNNL_ARG_DST, nullptr}, {DNNL_ARG_SCRATCHPAD, nullptr}};
  const int nargs = g->scratch_bytes > 0 ? 4 : 3;
  void* const handles[4] = {const_cast<float*>(a), const_cast<float*>(b), tile,
                            nargs == 4 ? Scratch(kGemm, (g->scratch_bytes + 3) / 4) : nullptr};
  const dnnl_memory_desc_t* descs[4] = {&g->a, &g->b, &g->c, &g->scratch};
  dnnl_status_t st = dnnl_success;
  for (int i = 0; i < nargs && st == dnnl_success; ++i)
    st = dnnl_memory_create(&args[i].memory, descs[i], Engine(), handles[i]);
  if (st == dnnl_success) {
    const OneOmpThread one;
    st = dnnl_primitive_execute(g->matmul, stream.get(), nargs, args);
    if (st == dnnl_success) st = dnnl_stream_wait(stream.get());
  }
  for (int i = 0; i < nargs; ++i)
    if (args[i].memory) dnnl_memory_destroy(args[i].memory);
  Check(st, "matmul execution");
}
}  // namespace opf::fused_dense_cpu
#endif  // OPF_JIT_KERNELS

namespace opf::fused_dense_cpu {
#ifdef OPF_JIT_KERNELS  // the host module's, through the table it passes in (Dense::gemm)
inline void GemmPrepare(const Dense& a, const GemmShape& s) { a.gemm->prepare(s); }
inline void GemmRun(const Dense& a, const Mat& A, const Mat& B, int64_t k, int64_t i0, int64_t i1, int64_t j0,
                    int64_t j1, float* tile) {
  a.gemm->tile(A, B, k, i0, i1, j0, j1, tile);
}
#else
inline void GemmPrepare(const Dense&, const GemmShape& s) { GemmFor(s); }
inline void GemmRun(const Dense&, const Mat& A, const Mat& B, int64_t k, int64_t i0, int64_t i1, int64_t j0, int64_t j1,
                    float* tile) {
  GemmTile(A, B, k, i0, i1, j0, j1, tile);
}
#endif

// Tile edge for a dimension of n: the tune maximum, or smaller so that a small problem still
// makes about 4 tiles per dimension (pool work); from the shape alone.
inline int64_t TileEdge(int64_t n, int64_t most) {
  const int64_t quarter = ((n + 3) / 4 + 15) / 16 * 16;
  return std::clamp<int64_t>(quarter, 16, std::max<int64_t>(most, 16));
}
}  // namespace opf::fused_dense_cpu
#endif  // OPF_FUSED_DENSE_CPU_COMMON

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "ops/fused_dense/cpu.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "cpu/simd-inl.h"
#include "cpu/exp-inl.h"

HWY_BEFORE_NAMESPACE();
namespace opf::fused_dense_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace opf::cpu::HWY_NAMESPACE;
using opf::cpu::from_f32;
using opf::cpu::to_f32;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Calls body(j, n) for columns [j, j + n) of a row of w; n = N but for the last call. Bodies load
// short tails through zero-padded vectors, so a column's math is the same wherever it falls.
template <class Body>
HWY_INLINE void ForColumns(DF d, size_t w, Body&& body) {
  const size_t N = hn::Lanes(d);
  for (size_t j = 0; j < w; j += N) body(j, std::min(N, w - j));
}
template <class S>
HWY_INLINE VF LoadPart(DF d, const S* p, size_t n) {
  if (n == hn::Lanes(d)) return LoadWiden(d, p);
  HWY_ALIGN float buf[kMaxLanes] = {};
  for (size_t k = 0; k < std::min(n, kMaxLanes); ++k) buf[k] = to_f32(p[k]);
  return hn::Load(d, buf);
}
HWY_INLINE void StorePart(DF d, VF v, float* p, size_t n) {
  if (n == hn::Lanes(d)) return hn::StoreU(v, d, p);
  HWY_ALIGN float buf[kMaxLanes];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, std::min(n, kMaxLanes) * sizeof(float));
}
// y[0, n) = f32 row src rounded to S
template <class S>
HWY_INLINE void StoreRow(DF d, const float* src, S* y, size_t n) {
  if constexpr (std::is_same_v<S, float>) {
    std::memcpy(y, src, n * sizeof(float));
  } else {
    WriteRow(
        d, y, n, false, [&](size_t k) { return hn::LoadU(d, src + k); }, [&](size_t k) { return src[k]; });
  }
}

// GELU (tanh form) through a sigmoid: 0.5 h (1 + tanh z) = h s(2z), GELU' = s + 2 h s (1 - s) z',
// z = √(2/π) (h + 0.044715 h³). s and 1 - s from e = exp(-|2z|) without cancellation; e below
// f32's normal range is 0, so far from 0 s is exactly 0 or 1 and s (1 - s) exactly 0. h² is
// capped at 2^60 (z already saturates s there) so that h³ and z' stay finite: 0 · z' is 0, not
// NaN. A NaN h still reaches both results through the factor h.
struct GeluParts {
  VF s, t, h2;  // s(2z), 1 - s(2z), min(h², 2^60)
};
HWY_INLINE GeluParts GeluSig(DF d, VF h) {
  const auto one = hn::Set(d, 1.0f), cap = hn::Set(d, 0x1p60f);
  auto h2 = hn::Mul(h, h);
  h2 = hn::IfThenElse(hn::Lt(h2, cap), h2, cap);
  const auto z2 =
      hn::Mul(hn::Set(d, 2.0f * 0.7978845608f), hn::Mul(h, hn::Add(one, hn::Mul(hn::Set(d, 0.044715f), h2))));
  const auto m = hn::Neg(hn::Abs(z2));
  const auto e = hn::IfThenZeroElse(hn::Lt(m, hn::Set(d, kExpFloor)), ExpClamped(d, m));
  const auto r = hn::Div(one, hn::Add(one, e)), er = hn::Mul(e, r);
  const auto neg = hn::Lt(z2, hn::Zero(d));
  return {hn::IfThenElse(neg, er, r), hn::IfThenElse(neg, r, er), h2};
}
HWY_INLINE VF Gelu(DF d, VF h) { return hn::Mul(h, GeluSig(d, h).s); }
HWY_INLINE VF DGelu(DF d, VF h) {
  const GeluParts g = GeluSig(d, h);
  const auto dz =
      hn::Mul(hn::Set(d, 0.7978845608f), hn::Add(hn::Set(d, 1.0f), hn::Mul(hn::Set(d, 3.0f * 0.044715f), g.h2)));
  // ((s (1 - s)) z') h 2: the saturated 0 first, so that a huge h never meets it as inf
  return hn::Add(g.s, hn::Mul(hn::Mul(hn::Mul(hn::Mul(g.s, g.t), dz), h), hn::Set(d, 2.0f)));
}

// An f32 view of a [rows, cols] T tensor: the data itself for f32, else a widened copy in keep.
template <class S>
const float* Widened(const opf_host* host, const void* src, int64_t rows, int64_t cols, Slot slot) {
  if constexpr (std::is_same_v<S, float>) {
    return static_cast<const float*>(src);
  } else {
    const size_t n = size_t(rows * cols);
    float* dst = Scratch(slot, std::max<size_t>(n, 1));
    const S* s = static_cast<const S*>(src);
    const int64_t chunk = opf::cpu::rows_per_task(rows, 6.0 * double(cols));
    opf::cpu::parallel_rows(host, rows, chunk, [&](int64_t r0, int64_t r1) {
      const DF d;
      const size_t N = hn::Lanes(d), e0 = size_t(r0 * cols), e1 = size_t(r1 * cols);
      size_t k = e0;
      for (; k + N <= e1; k += N) hn::StoreU(LoadWiden(d, s + k), d, dst + k);
      OPF_SCALAR_LOOP
      for (; k < e1; ++k) dst[k] = to_f32(s[k]);
    });
    return dst;
  }
}

// C [m, n] = op(A)·op(B) in tiles; epi(i0, i1, j0, j1, tile) consumes each tile (row-major,
// leading dimension j1 - j0) on the task that computed it.
template <class Epi>
void Tiled(const Dense& a, const Mat& A, const Mat& B, int64_t m, int64_t n, int64_t k, Epi&& epi) {
  if (m <= 0 || n <= 0) return;
  const int64_t tm = TileEdge(m, OPF_TUNE_TILE_M), tn = TileEdge(n, OPF_TUNE_TILE_N);
  const int64_t mt = (m + tm - 1) / tm, nt = (n + tn - 1) / tn;
  // the (at most four) tile shapes' matmuls are made here, on the calling thread, where an error
  // reaches the module boundary as an exception
  if (k > 0)
    for (const int64_t tile_m : {tm, m - (mt - 1) * tm})
      for (const int64_t tile_n : {tn, n - (nt - 1) * tn})
        if (tile_m <= m && tile_n <= n) GemmPrepare(a, {tile_m, tile_n, k, A.ld, B.ld, A.trans, B.trans});
  opf::cpu::parallel_for(a.host, mt * nt, [&](int64_t t) {
    const int64_t i0 = (t / nt) * tm, j0 = (t % nt) * tn;
    const int64_t i1 = std::min(m, i0 + tm), j1 = std::min(n, j0 + tn);
    float* tile = Scratch(kTile, size_t(tm * tn));
    GemmRun(a, A, B, k, i0, i1, j0, j1, tile);
    epi(i0, i1, j0, j1, tile);
  });
}

// out [m, n] (T) = the tiles rounded, plus bias[j] (f32) when given.
template <class S>
void GemmStore(const Dense& a, const Mat& A, const Mat& B, int64_t m, int64_t n, int64_t k, const float* bias,
               void* out) {
  Tiled(a, A, B, m, n, k, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* tile) {
    const DF d;
    const size_t w = size_t(j1 - j0);
    for (int64_t i = i0; i < i1; ++i) {
      float* row = tile + (i - i0) * int64_t(w);
      if (bias)
        ForColumns(d, w, [&](size_t j, size_t c) {
          StorePart(d, hn::Add(LoadPart(d, row + j, c), LoadPart(d, bias + j0 + j, c)), row + j, c);
        });
      StoreRow(d, row, static_cast<S*>(out) + i * n + j0, w);
    }
  });
}

// Bias gradients: each task adds its rows into an f32 partial, column by column, and moves the
// partial into its f64 totals after every reduce_rows rows and after its last row. Lanes are
// columns, so every column is summed in row order whatever the vector width. Row i of the task's
// rows [i0, i1).
HWY_INLINE void AddRow(const float* HWY_RESTRICT row, size_t w, int64_t i, int64_t i0, int64_t i1,
                       float* HWY_RESTRICT part, double* HWY_RESTRICT tot) {
  const DF d;
  const size_t N = hn::Lanes(d);
  size_t j = 0;
  for (; j + N <= w; j += N) hn::StoreU(hn::Add(hn::LoadU(d, part + j), hn::LoadU(d, row + j)), d, part + j);
  OPF_SCALAR_LOOP
  for (; j < w; ++j) part[j] += row[j];
  if ((i + 1 - i0) % OPF_TUNE_REDUCE_ROWS != 0 && i + 1 != i1) return;
  const hn::ScalableTag<double> dd;
  const hn::Rebind<float, decltype(dd)> dh;
  const size_t M = hn::Lanes(dd);
  for (j = 0; j + M <= w; j += M)
    hn::StoreU(hn::Add(hn::LoadU(dd, tot + j), hn::PromoteTo(dd, hn::LoadU(dh, part + j))), dd, tot + j);
  OPF_SCALAR_LOOP
  for (; j < w; ++j) tot[j] += double(part[j]);
  std::memset(part, 0, w * sizeof(float));
}

// Column sums of an f32 [rows, cols] matrix into out (T), in f64 in an order fixed by the row
// count (cpu/parallel.h parallel_column_sums).
template <class S>
void ColumnSums(const opf_host* host, const float* src, int64_t rows, int64_t cols, void* out) {
  std::vector<double> sums;
  const size_t w = size_t(cols);
  opf::cpu::parallel_column_sums(host, rows, OPF_TUNE_REDUCE_ROWS, w, sums,
                                 [&](int64_t r0, int64_t r1, double* totals) {
                                   float* part = Scratch(kPart, std::max<size_t>(w, 1));
                                   std::memset(part, 0, w * sizeof(float));
                                   for (int64_t r = r0; r < r1; ++r) AddRow(src + r * cols, w, r, r0, r1, part, totals);
                                 });
  S* o = static_cast<S*>(out);
  for (size_t j = 0; j < w; ++j) o[j] = from_f32<S>(float(sums[j]));
}

template <class S>
std::vector<float> WidenVec(const void* p, int64_t n) {
  std::vector<float> v(size_t(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = to_f32(static_cast<const S*>(p)[i]);
  return v;
}

template <class S>
void LinearBiasForwardT(const Dense& a) {
  const float* x = Widened<S>(a.host, a.x, a.b, a.in, kX);
  const float* w = Widened<S>(a.host, a.w1, a.hid, a.in, kW1);
  const std::vector<float> bias = WidenVec<S>(a.b1, a.hid);
  GemmStore<S>(a, {x, a.in, false}, {w, a.in, true}, a.b, a.hid, a.in, bias.data(), a.y);
}

template <class S>
void LinearBiasBackwardT(const Dense& a) {
  const float* dy = Widened<S>(a.host, a.dy, a.b, a.hid, kDy);
  const float* x = Widened<S>(a.host, a.x, a.b, a.in, kX);
  const float* w = Widened<S>(a.host, a.w1, a.hid, a.in, kW1);
  GemmStore<S>(a, {dy, a.hid, false}, {w, a.in, false}, a.b, a.in, a.hid, nullptr, a.dx);
  GemmStore<S>(a, {dy, a.hid, true}, {x, a.in, false}, a.hid, a.in, a.b, nullptr, a.dw1);
  ColumnSums<S>(a.host, dy, a.b, a.hid, a.db1);
}

template <class S>
void GeluForwardT(const Dense& a) {
  const float* x = Widened<S>(a.host, a.x, a.b, a.in, kX);
  const float* w1 = Widened<S>(a.host, a.w1, a.hid, a.in, kW1);
  const float* w2 = Widened<S>(a.host, a.w2, a.out, a.hid, kW2);
  const std::vector<float> b1 = WidenVec<S>(a.b1, a.hid), b2 = WidenVec<S>(a.b2, a.out);
  // The f32 GELU output the second GEMM reads: the output a itself for f32
  float* act = nullptr;
  if constexpr (std::is_same_v<S, float>) {
    act = static_cast<float*>(a.a_out);
  } else {
    act = Scratch(kAct, size_t(std::max<int64_t>(a.b * a.hid, 1)));
  }
  const int64_t hid = a.hid;
  Tiled(a, {x, a.in, false}, {w1, a.in, true}, a.b, hid, a.in,
        [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* tile) {
          const DF d;
          const size_t w = size_t(j1 - j0);
          for (int64_t i = i0; i < i1; ++i) {
            float* row = tile + (i - i0) * int64_t(w);
            float* arow = act + i * hid + j0;
            ForColumns(d, w, [&](size_t j, size_t c) {
              const auto hv = hn::Add(LoadPart(d, row + j, c), LoadPart(d, b1.data() + j0 + j, c));
              StorePart(d, hv, row + j, c);
              StorePart(d, Gelu(d, hv), arow + j, c);
            });
            StoreRow(d, row, static_cast<S*>(a.h_out) + i * hid + j0, w);
            if constexpr (!std::is_same_v<S, float>) StoreRow(d, arow, static_cast<S*>(a.a_out) + i * hid + j0, w);
          }
        });
  GemmStore<S>(a, {act, hid, false}, {w2, hid, true}, a.b, a.out, hid, b2.data(), a.y);
}

template <class S>
void GeluBackwardT(const Dense& a) {
  const int64_t b = a.b, hid = a.hid;
  const float* dy = Widened<S>(a.host, a.dy, b, a.out, kDy);
  const float* x = Widened<S>(a.host, a.x, b, a.in, kX);
  const float* act = Widened<S>(a.host, a.a, b, hid, kA);
  const float* w1 = Widened<S>(a.host, a.w1, hid, a.in, kW1);
  const float* w2 = Widened<S>(a.host, a.w2, a.out, hid, kW2);
  GemmStore<S>(a, {dy, a.out, true}, {act, hid, false}, a.out, hid, b, nullptr, a.dw2);
  ColumnSums<S>(a.host, dy, b, a.out, a.db2);

  // dH = (dy·w2) ⊙ GELU'(h), kept in f32; its column sums (dbias1) come from the same tile pass:
  // each tile adds its rows in f32 blocks of reduce_rows into f64 totals of its own (a row of
  // `totals` per tile row index), summed in tile order below.
  float* dh = Scratch(kDh, size_t(std::max<int64_t>(b * hid, 1)));
  const int64_t tm = TileEdge(b, OPF_TUNE_TILE_M), row_tiles = (b + tm - 1) / tm;
  std::vector<double> totals(size_t(row_tiles * hid), 0.0);
  const S* hs = static_cast<const S*>(a.h);
  Tiled(a, {dy, a.out, false}, {w2, hid, false}, b, hid, a.out,
        [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1, float* tile) {
          const DF d;
          const size_t w = size_t(j1 - j0);
          float* part = Scratch(kPart, w);  // w >= 1: Tiled makes no empty tile
          std::memset(part, 0, w * sizeof(float));
          double* tot = totals.data() + (i0 / tm) * hid + j0;
          for (int64_t i = i0; i < i1; ++i) {
            const float* row = tile + (i - i0) * int64_t(w);
            float* out = dh + i * hid + j0;
            ForColumns(d, w, [&](size_t j, size_t c) {
              const auto g = hn::Mul(LoadPart(d, row + j, c), DGelu(d, LoadPart(d, hs + i * hid + j0 + j, c)));
              StorePart(d, g, out + j, c);
            });
            AddRow(out, w, i, i0, i1, part, tot);
          }
        });
  S* db1 = static_cast<S*>(a.db1);
  for (int64_t j = 0; j < hid; ++j) {
    double s = 0;
    for (int64_t t = 0; t < row_tiles; ++t) s += totals[size_t(t * hid + j)];
    db1[j] = from_f32<S>(float(s));
  }
  GemmStore<S>(a, {dh, hid, true}, {x, a.in, false}, hid, a.in, b, nullptr, a.dw1);
  GemmStore<S>(a, {dh, hid, false}, {w1, a.in, false}, b, a.in, hid, nullptr, a.dx);
}

void RunLinearBiasForward(const Dense& a) {
  opf::cpu::run_storage<"linear_bias_forward">(a.dtype, [&](auto s) { LinearBiasForwardT<decltype(s)>(a); });
}
void RunLinearBiasBackward(const Dense& a) {
  opf::cpu::run_storage<"linear_bias_backward">(a.dtype, [&](auto s) { LinearBiasBackwardT<decltype(s)>(a); });
}
void RunGeluForward(const Dense& a) {
  opf::cpu::run_storage<"linear_gelu_linear_forward">(a.dtype, [&](auto s) { GeluForwardT<decltype(s)>(a); });
}
void RunGeluBackward(const Dense& a) {
  opf::cpu::run_storage<"linear_gelu_linear_backward">(a.dtype, [&](auto s) { GeluBackwardT<decltype(s)>(a); });
}
const char* TargetName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace opf::fused_dense_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace opf::fused_dense_cpu {
OPF_KERNEL_EXPORT(RunLinearBiasForward);
OPF_KERNEL_EXPORT(RunLinearBiasBackward);
OPF_KERNEL_EXPORT(RunGeluForward);
OPF_KERNEL_EXPORT(RunGeluBackward);
OPF_CPU_EXPORT_TARGET()
}  // namespace opf::fused_dense_cpu
#endif  // HWY_ONCE

#if HWY_ONCE && OPF_HOST_PART  // the host code: not in a JIT kernels module (cpu/dispatch.h)
OPF_HOST_CODE_BEGIN
namespace opf::fused_dense_cpu {
using namespace opf::cpu;

// Size d of argument i, after checking that it is a 2-D tensor (its full shape is checked later).
int64_t dim_of(const Args& args, int i, const char* name, int d) {
  const opf_tensor& t = args.tensor(i, name);
  if (t.ndim != 2) failf("%s: argument %d (%s) has %d dims, expected 2", args.entry(), i, name, t.ndim);
  return t.shape[d];
}

#ifdef OPF_JIT_HOST
void PrepareGemm(const GemmShape& s) { GemmFor(s); }
const GemmApi kGemmApi{PrepareGemm, GemmTile};
#endif

void call(const opf_call* c, bool execute) {
  const std::string_view entry = c->entry ? c->entry : "";
  Dense a{};
  a.host = c->host;
#ifdef OPF_JIT_HOST
  a.gemm = &kGemmApi;
#endif
  if (entry == "linear_bias_forward") {
    const Args args(c, 4, 0);
    const opf_tensor& x = expect_lead(args, 0, "x", 2, "[batch, in]");
    a.dtype = x.dtype, a.b = x.shape[0], a.in = x.shape[1], a.hid = dim_of(args, 1, "weight", 0);
    a.x = x.data;
    a.w1 = expect_arg(args, 1, "weight", a.dtype, {a.hid, a.in}).data;
    a.b1 = expect_arg(args, 2, "bias", a.dtype, {a.hid}).data;
    a.y = expect_arg(args, 3, "y", a.dtype, {a.b, a.hid}).data;
  } else if (entry == "linear_bias_backward") {
    const Args args(c, 6, 0);
    const opf_tensor& dy = expect_lead(args, 0, "dy", 2, "[batch, hidden]");
    a.dtype = dy.dtype, a.b = dy.shape[0], a.hid = dy.shape[1], a.in = dim_of(args, 1, "x", 1);
    a.dy = expect_arg(args, 0, "dy", a.dtype, {a.b, a.hid}).data;
    a.x = expect_arg(args, 1, "x", a.dtype, {a.b, a.in}).data;
    a.w1 = expect_arg(args, 2, "weight", a.dtype, {a.hid, a.in}).data;
    a.dx = expect_arg(args, 3, "dx", a.dtype, {a.b, a.in}).data;
    a.dw1 = expect_arg(args, 4, "dweight", a.dtype, {a.hid, a.in}).data;
    a.db1 = expect_arg(args, 5, "dbias", a.dtype, {a.hid}).data;
  } else if (entry == "linear_gelu_linear_forward") {
    const Args args(c, 8, 0);
    const opf_tensor& x = expect_lead(args, 0, "x", 2, "[batch, in]");
    a.dtype = x.dtype, a.b = x.shape[0], a.in = x.shape[1];
    a.hid = dim_of(args, 1, "weight1", 0), a.out = dim_of(args, 3, "weight2", 0);
    a.x = x.data;
    a.w1 = expect_arg(args, 1, "weight1", a.dtype, {a.hid, a.in}).data;
    a.b1 = expect_arg(args, 2, "bias1", a.dtype, {a.hid}).data;
    a.w2 = expect_arg(args, 3, "weight2", a.dtype, {a.out, a.hid}).data;
    a.b2 = expect_arg(args, 4, "bias2", a.dtype, {a.out}).data;
    a.a_out = expect_arg(args, 5, "a", a.dtype, {a.b, a.hid}).data;
    a.y = expect_arg(args, 6, "y", a.dtype, {a.b, a.out}).data;
    a.h_out = expect_arg(args, 7, "h", a.dtype, {a.b, a.hid}).data;
  } else if (entry == "linear_gelu_linear_backward") {
    const Args args(c, 11, 0);
    const opf_tensor& dy = expect_lead(args, 0, "dy", 2, "[batch, out]");
    a.dtype = dy.dtype, a.b = dy.shape[0], a.out = dy.shape[1];
    a.in = dim_of(args, 1, "x", 1), a.hid = dim_of(args, 2, "h", 1);
    a.dy = expect_arg(args, 0, "dy", a.dtype, {a.b, a.out}).data;
    a.x = expect_arg(args, 1, "x", a.dtype, {a.b, a.in}).data;
    a.h = expect_arg(args, 2, "h", a.dtype, {a.b, a.hid}).data;
    a.a = expect_arg(args, 3, "a", a.dtype, {a.b, a.hid}).data;
    a.w1 = expect_arg(args, 4, "weight1", a.dtype, {a.hid, a.in}).data;
    a.w2 = expect_arg(args, 5, "weight2", a.dtype, {a.out, a.hid}).data;
    a.dx = expect_arg(args, 6, "dx", a.dtype, {a.b, a.in}).data;
    a.dw1 = expect_arg(args, 7, "dweight1", a.dtype, {a.hid, a.in}).data;
    a.db1 = expect_arg(args, 8, "dbias1", a.dtype, {a.hid}).data;
    a.dw2 = expect_arg(args, 9, "dweight2", a.dtype, {a.out, a.hid}).data;
    a.db2 = expect_arg(args, 10, "dbias2", a.dtype, {a.out}).data;
  } else {
    failf(
        "unknown entry '%.40s' (fused_dense has linear_bias_forward, linear_bias_backward, "
        "linear_gelu_linear_forward, linear_gelu_linear_backward)",
        c->entry ? c->entry : "");
  }
  if (!execute) return;
  if (entry == "linear_bias_forward") OPF_DISPATCH(RunLinearBiasForward)(a);
  else if (entry == "linear_bias_backward") OPF_DISPATCH(RunLinearBiasBackward)(a);
  else if (entry == "linear_gelu_linear_forward") OPF_DISPATCH(RunGeluForward)(a);
  else OPF_DISPATCH(RunGeluBackward)(a);
}

}  // namespace opf::fused_dense_cpu

OPF_DEFINE_MODULE("fused_dense", "cpu", opf::fused_dense_cpu::isa(), opf::fused_dense_cpu::call)
OPF_HOST_CODE_END
#endif  // HWY_ONCE
