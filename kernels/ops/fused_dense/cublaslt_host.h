// What one cuBLASLt GEMM of cublaslt.h computes, run on the host, for the GPU emulation
// (launch.cpp built with OPF_LAUNCH_EMU): the emulation sweep then checks launch.cpp's mapping of
// each entry onto cuBLASLt GEMMs (transposes, leading dimensions, which argument is which, the
// epilogues' vectors) against ref.cpp's float64 reference, as a device would check the library
// itself. Semantics as cublasLt.h documents them; sums in double, one rounding per output.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/fused_dense/cublaslt.h"

namespace fused_dense_lt {

inline opf::DType host_type(cudaDataType_t t) {
  return t == CUDA_R_16F ? opf::DType::f16 : t == CUDA_R_16BF ? opf::DType::bf16 : opf::DType::f32;
}

// GELU, tanh form (cuBLASLt's), and its derivative.
inline double gelu(double h) {
  const double c = std::sqrt(2.0 / M_PI), u = c * (h + 0.044715 * h * h * h);
  return 0.5 * h * (1.0 + std::tanh(u));
}
inline double gelu_grad(double h) {
  const double c = std::sqrt(2.0 / M_PI), t = std::tanh(c * (h + 0.044715 * h * h * h));
  return 0.5 * (1.0 + t) + 0.5 * h * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * h * h);
}

inline void emulate(const Gemm& g) {
  const opf::DType ab = host_type(g.ab_type), dt = host_type(g.d_type);
  auto op_a = [&](int64_t i, int64_t p) { return opf::load_element(ab, g.a, g.ta ? p + i * g.lda : i + p * g.lda); };
  auto op_b = [&](int64_t p, int64_t j) { return opf::load_element(ab, g.b, g.tb ? j + p * g.ldb : p + j * g.ldb); };
  std::vector<double> row_grad(size_t(g.m), 0.0);  // DGELU_BGRAD: Σ over the columns of D
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      double acc = 0;
      for (int64_t p = 0; p < g.k; ++p) acc += op_a(i, p) * op_b(p, j);
      const int64_t at = i + j * g.ldd;
      switch (g.epilogue) {
        case CUBLASLT_EPILOGUE_BIAS: acc += opf::load_element(dt, g.bias, i); break;
        case CUBLASLT_EPILOGUE_GELU_AUX_BIAS:
          acc += opf::load_element(dt, g.bias, i);
          opf::store_element(dt, g.aux, i + j * g.ldaux, acc);
          acc = gelu(acc);
          break;
        case CUBLASLT_EPILOGUE_DGELU_BGRAD:
          acc *= gelu_grad(opf::load_element(dt, g.aux, i + j * g.ldaux));
          row_grad[size_t(i)] += acc;
          break;
        default: break;  // DEFAULT, BGRADB: D is the product
      }
      opf::store_element(dt, g.d, at, acc);
    }
  if (g.epilogue == CUBLASLT_EPILOGUE_DGELU_BGRAD)
    for (int64_t i = 0; i < g.m; ++i) opf::store_element(dt, g.bias, i, row_grad[size_t(i)]);
  if (g.epilogue == CUBLASLT_EPILOGUE_BGRADB)  // Σ over k of op(B), one value per column of D
    for (int64_t j = 0; j < g.n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < g.k; ++p) s += op_b(p, j);
      opf::store_element(dt, g.bias, j, s);
    }
}

}  // namespace fused_dense_lt
