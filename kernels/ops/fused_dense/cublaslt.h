// fused_dense on CUDA through cuBLASLt (launch.cpp, OPF_LAUNCH_CUDA builds only): each GEMM of
// an entry is one cublasLtMatmul with the epilogue apex's fused_dense uses (BIAS, GELU_AUX_BIAS,
// BGRADB, DGELU_BGRAD), f32 accumulation (CUBLAS_COMPUTE_32F, never TF32).
//
// Which calls it takes: those where cuBLASLt computes exactly the contract of ref.cpp. Every
// linear_bias call; linear_gelu_linear only in f32, because the contract keeps the intermediates
// (the second GEMM's A, dH) in f32, and cuBLASLt's GEMMs on 16-bit operands would read them
// rounded to T. Empty GEMMs (a zero batch, in, hidden or out) and shapes cuBLASLt declines (its
// heuristic finds no algorithm: e.g. a GELU aux leading dimension not divisible by 8) go to the
// opforge GEMM of kernel.cu, which handles every call. Whether cuBLASLt takes the call is decided
// for all the entry's GEMMs before any runs: a call never mixes the two.
//
// libcublasLt is dlopen()ed like the driver and NVRTC (core/cuda_backend.cpp): the module loads,
// and fused_dense runs on the opforge GEMM, where the toolkit's library is absent.
// OPFORGE_FUSED_DENSE_GEMM picks the GEMM: auto (default) as above; cublaslt: a call cuBLASLt
// cannot take fails with the reason (device checks use it to prove the cuBLASLt path ran);
// opforge: the opforge GEMM always.
#pragma once

#include <cublasLt.h>
#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "gpu/launcher.h"
#include "opforge/dtype.h"

#ifndef OPF_CUDA_LIB_DIR
#define OPF_CUDA_LIB_DIR ""
#endif

namespace fused_dense_lt {

enum class Choice { automatic, cublaslt, opforge };

// The GEMM choice from OPFORGE_FUSED_DENSE_GEMM; *bad names a value that is none of the three.
inline Choice choice(std::string* bad) {
  const char* v = std::getenv("OPFORGE_FUSED_DENSE_GEMM");
  const std::string s = v ? v : "";
  if (s.empty() || s == "auto") return Choice::automatic;
  if (s == "cublaslt") return Choice::cublaslt;
  if (s == "opforge") return Choice::opforge;
  *bad = "OPFORGE_FUSED_DENSE_GEMM='" + s + "' is not auto, cublaslt or opforge";
  return Choice::automatic;
}

struct Library {
  std::string error;  // why it is not usable ("" when it is)
  cublasLtHandle_t handle = nullptr;
  decltype(&cublasLtCreate) create = nullptr;
  decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
  decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
  decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
  decltype(&cublasLtMatmul) matmul = nullptr;
  decltype(&cublasLtGetStatusString) status_string = nullptr;

  Library() {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    std::vector<std::string> candidates;
    if (*OPF_CUDA_LIB_DIR) candidates.push_back(std::string(OPF_CUDA_LIB_DIR) + "/" + soname);
    candidates.push_back(soname);
    void* so = nullptr;
    for (const auto& c : candidates)
      if ((so = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
    if (!so) {
      error = "cuBLASLt not loadable (tried " + candidates.front() + " and " + soname + ")";
      return;
    }
    bool missing = false;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(so, name));
      if (!fn && !missing) error = std::string("cuBLASLt lacks ") + name, missing = true;
    };
    sym(create, "cublasLtCreate");
    sym(desc_create, "cublasLtMatmulDescCreate");
    sym(desc_destroy, "cublasLtMatmulDescDestroy");
    sym(desc_set, "cublasLtMatmulDescSetAttribute");
    sym(layout_create, "cublasLtMatrixLayoutCreate");
    sym(layout_destroy, "cublasLtMatrixLayoutDestroy");
    sym(pref_create, "cublasLtMatmulPreferenceCreate");
    sym(pref_destroy, "cublasLtMatmulPreferenceDestroy");
    sym(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    sym(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    sym(matmul, "cublasLtMatmul");
    sym(status_string, "cublasLtGetStatusString");
    if (missing) return;
    // One handle for the process: it holds no per-call state (calls are stream-ordered).
    if (cublasStatus_t s = create(&handle); s != CUBLAS_STATUS_SUCCESS)
      error = std::string("cublasLtCreate: ") + status_string(s), handle = nullptr;
  }
  std::string why(cublasStatus_t s) const { return status_string(s); }
};

inline const Library& library() {
  static const Library lib;  // dlopen once per process
  return lib;
}

// One GEMM of column-major BLAS terms: D (m x n, ldd) = op(A) op(B) + epilogue, op(A) m x k.
// Row-major tensors are their own transposes in these terms (launch.cpp's mapping).
struct Gemm {
  bool ta = false, tb = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cudaDataType_t ab_type = CUDA_R_32F, d_type = CUDA_R_32F;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;  // BIAS: read; BGRADB, DGELU_BGRAD: written
  void* aux = nullptr;   // GELU_AUX_BIAS: h written; DGELU_BGRAD: h read
  int64_t ldaux = 0;
};

// A GEMM with its descriptors and the algorithm cuBLASLt's heuristic picked for it.
class Plan {
 public:
  Plan(const Library& lib, const Gemm& g, void* workspace, size_t workspace_bytes)
      : lib_(lib), g_(g), workspace_(workspace), workspace_bytes_(workspace_bytes) {}
  ~Plan() {
    for (auto l : {la_, lb_, ld_})
      if (l) lib_.layout_destroy(l);
    if (desc_) lib_.desc_destroy(desc_);
  }
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  // "" when cuBLASLt has an algorithm for this GEMM, else why not.
  std::string prepare() {
    auto fail = [&](const char* what, cublasStatus_t s) { return std::string(what) + ": " + lib_.why(s); };
    if (auto s = lib_.desc_create(&desc_, CUBLAS_COMPUTE_32F, CUDA_R_32F); s != CUBLAS_STATUS_SUCCESS)
      return fail("cublasLtMatmulDescCreate", s);
    const cublasOperation_t ta = g_.ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g_.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
    auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t size) {
      if (s == CUBLAS_STATUS_SUCCESS) s = lib_.desc_set(desc_, attr, v, size);
    };
    set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    set(CUBLASLT_MATMUL_DESC_EPILOGUE, &g_.epilogue, sizeof g_.epilogue);
    if (g_.bias) set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g_.bias, sizeof g_.bias);
    if (g_.aux) {
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &g_.aux, sizeof g_.aux);
      set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &g_.ldaux, sizeof g_.ldaux);
    }
    if (s != CUBLAS_STATUS_SUCCESS) return fail("cublasLtMatmulDescSetAttribute", s);
    // Stored shapes: A is k x m when transposed, B is n x k when transposed.
    if (s = lib_.layout_create(&la_, g_.ab_type, uint64_t(g_.ta ? g_.k : g_.m), uint64_t(g_.ta ? g_.m : g_.k), g_.lda);
        s != CUBLAS_STATUS_SUCCESS)
      return fail("cublasLtMatrixLayoutCreate", s);
    if (s = lib_.layout_create(&lb_, g_.ab_type, uint64_t(g_.tb ? g_.n : g_.k), uint64_t(g_.tb ? g_.k : g_.n), g_.ldb);
        s != CUBLAS_STATUS_SUCCESS)
      return fail("cublasLtMatrixLayoutCreate", s);
    if (s = lib_.layout_create(&ld_, g_.d_type, uint64_t(g_.m), uint64_t(g_.n), g_.ldd); s != CUBLAS_STATUS_SUCCESS)
      return fail("cublasLtMatrixLayoutCreate", s);
    cublasLtMatmulPreference_t pref = nullptr;
    if (s = lib_.pref_create(&pref); s != CUBLAS_STATUS_SUCCESS) return fail("cublasLtMatmulPreferenceCreate", s);
    const uint64_t ws = workspace_bytes_;
    s = lib_.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    int found = 0;
    if (s == CUBLAS_STATUS_SUCCESS)
      s = lib_.heuristic(lib_.handle, desc_, la_, lb_, ld_, ld_, pref, 1, &result_, &found);
    lib_.pref_destroy(pref);
    if (s != CUBLAS_STATUS_SUCCESS) return fail("cublasLtMatmulAlgoGetHeuristic", s);
    if (found < 1) return "cuBLASLt has no algorithm for it";
    return "";
  }

  std::string run(void* stream) const {
    const float one = 1.0f, zero = 0.0f;
    const cublasStatus_t s =
        lib_.matmul(lib_.handle, desc_, &one, g_.a, la_, g_.b, lb_, &zero, g_.d, ld_, g_.d, ld_, &result_.algo,
                    workspace_, workspace_bytes_, static_cast<cudaStream_t>(stream));
    return s == CUBLAS_STATUS_SUCCESS ? "" : "cublasLtMatmul: " + lib_.why(s);
  }

 private:
  const Library& lib_;
  Gemm g_;
  void* workspace_;
  size_t workspace_bytes_;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t la_ = nullptr, lb_ = nullptr, ld_ = nullptr;
  cublasLtMatmulHeuristicResult_t result_{};
};

inline cudaDataType_t cuda_type(opf::DType t) {
  return t == opf::DType::f16 ? CUDA_R_16F : t == opf::DType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
}

// The entry's GEMMs, in the order they must run, mapped as apex's fused_dense maps them: a
// row-major [r, c] tensor is a column-major c x r matrix, so y = x·wᵀ is yᵀ = w·xᵀ with
// m = hidden, n = batch, k = in. `a` holds the call's arguments in manifest order; dh is a
// [batch, hidden] scratch of the storage dtype (linear_gelu_linear_backward's dH; f32 where
// cuBLASLt takes the call). "" on success, else why cuBLASLt does not take the call (nothing is
// launched then). epilogues = false: the same GEMMs with none of the epilogues, in every dtype
// (the `cublaslt` peer: the time of the GEMMs alone, not the op).
inline std::string gemms(const std::string& entry, opf::DType dt, const opf_gpu_args& a, void* dh, std::vector<Gemm>& g,
                         bool epilogues = true) {
  g.clear();
  const bool gelu = entry == "linear_gelu_linear_forward" || entry == "linear_gelu_linear_backward";
  if (gelu && dt != opf::DType::f32 && epilogues)
    return "linear_gelu_linear keeps its intermediates in f32 (ref.cpp); cuBLASLt would read them as " +
           std::string(opf::dtype_name(dt));
  auto dim = [&](int arg, int d) { return int64_t(a.arg_shape[arg][d]); };
  auto ptr = [&](int arg) { return const_cast<void*>(a.ptr[arg]); };
  const cudaDataType_t t = cuda_type(dt);
  auto gemm = [&](bool ta, bool tb, int64_t m, int64_t n, int64_t k, const void* A, int64_t lda, const void* B,
                  int64_t ldb, void* D, int64_t ldd) -> Gemm& {
    Gemm x;
    x.ta = ta, x.tb = tb, x.m = m, x.n = n, x.k = k, x.a = A, x.lda = lda, x.b = B, x.ldb = ldb, x.d = D, x.ldd = ldd;
    x.ab_type = x.d_type = t;
    return g.emplace_back(x);
  };
  if (entry == "linear_bias_forward") {  // x, weight, bias -> y
    const int64_t b = dim(0, 0), in = dim(0, 1), hid = dim(1, 0);
    Gemm& y = gemm(true, false, hid, b, in, ptr(1), in, ptr(0), in, ptr(3), hid);  // yᵀ = w·xᵀ + bias
    y.epilogue = CUBLASLT_EPILOGUE_BIAS, y.bias = ptr(2);
  } else if (entry == "linear_bias_backward") {  // dy, x, weight -> dx, dweight, dbias
    const int64_t b = dim(1, 0), in = dim(1, 1), hid = dim(0, 1);
    gemm(false, false, in, b, hid, ptr(2), in, ptr(0), hid, ptr(3), in);            // dxᵀ = wᵀ·dyᵀ
    Gemm& dw = gemm(false, true, in, hid, b, ptr(1), in, ptr(0), hid, ptr(4), in);  // dwᵀ = xᵀ·dy
    dw.epilogue = CUBLASLT_EPILOGUE_BGRADB, dw.bias = ptr(5);                       // dbias = Σ_k dy
  } else if (entry == "linear_gelu_linear_forward") {                               // x, w1, b1, w2, b2 -> a, y, h
    const int64_t b = dim(0, 0), in = dim(0, 1), hid = dim(1, 0), out = dim(3, 0);
    Gemm& h = gemm(true, false, hid, b, in, ptr(1), in, ptr(0), in, ptr(5), hid);  // a = GELU(h), h kept
    h.epilogue = CUBLASLT_EPILOGUE_GELU_AUX_BIAS, h.bias = ptr(2), h.aux = ptr(7), h.ldaux = hid;
    Gemm& y = gemm(true, false, out, b, hid, ptr(3), hid, ptr(5), hid, ptr(6), out);  // y = a·w2ᵀ + b2
    y.epilogue = CUBLASLT_EPILOGUE_BIAS, y.bias = ptr(4);
  } else if (entry == "linear_gelu_linear_backward") {  // dy, x, h, a, w1, w2 -> dx, dw1, db1, dw2, db2
    const int64_t b = dim(1, 0), in = dim(1, 1), hid = dim(2, 1), out = dim(0, 1);
    Gemm& dw2 = gemm(false, true, hid, out, b, ptr(3), hid, ptr(0), out, ptr(9), hid);  // dw2ᵀ = aᵀ·dy
    dw2.epilogue = CUBLASLT_EPILOGUE_BGRADB, dw2.bias = ptr(10);                        // db2 = Σ_k dy
    Gemm& d = gemm(false, false, hid, b, out, ptr(5), hid, ptr(0), out, dh, hid);       // dH = dy·w2 ⊙ GELU'(h)
    d.epilogue = CUBLASLT_EPILOGUE_DGELU_BGRAD, d.bias = ptr(8), d.aux = ptr(2), d.ldaux = hid;  // db1 = Σ_n dH
    gemm(false, true, in, hid, b, ptr(1), in, dh, hid, ptr(7), in);                              // dw1ᵀ = xᵀ·dH
    gemm(false, false, in, b, hid, ptr(4), in, dh, hid, ptr(6), in);                             // dxᵀ = w1ᵀ·dHᵀ
  } else {
    return "no entry '" + entry + "'";
  }
  if (!epilogues)
    for (Gemm& x : g) x.epilogue = CUBLASLT_EPILOGUE_DEFAULT, x.bias = nullptr, x.aux = nullptr, x.ldaux = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (g[i].m == 0 || g[i].n == 0 || g[i].k == 0) return "GEMM " + std::to_string(i) + " is empty";
    if (g[i].aux && g[i].ldaux % 8 != 0)  // cublasLt.h: the GELU input's leading dimension
      return "GEMM " + std::to_string(i) + ": hidden = " + std::to_string(g[i].ldaux) +
             " is not divisible by 8 (cuBLASLt's rule for the GELU aux matrix)";
  }
  return "";
}

}  // namespace fused_dense_lt
