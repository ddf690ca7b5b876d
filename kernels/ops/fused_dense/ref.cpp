// fused_dense — float64 reference and case description.
//
// Contract (case shape [batch, in, hidden, out]; T = f32 | f16 | bf16 storage; every GEMM in f32
// (oneDNN f32 matmul: T operands are widened to f32 once per call, exactly), the epilogue in f32,
// one rounding to T per output; intermediates that are not outputs (linear_gelu_linear's A as the
// second GEMM reads it, dA, dH) stay in f32 and are never rounded to T):
//   linear_bias_forward (x [batch, in], weight [hidden, in], bias [hidden]) -> y [batch, hidden]
//     y = x·weightᵀ + bias
//   linear_bias_backward (dy [batch, hidden], x, weight) -> dx [batch, in], dweight [hidden, in],
//                                                          dbias [hidden]
//     dx = dy·weight, dweight = dyᵀ·x, dbias = Σ_rows dy (batch = 0: dweight = dbias = 0)
//   linear_gelu_linear_forward (x, weight1 [hidden, in], bias1 [hidden], weight2 [out, hidden],
//                               bias2 [out]) -> a [batch, hidden], y [batch, out], h [batch, hidden]
//     h = x·weight1ᵀ + bias1, a = GELU(h), y = a·weight2ᵀ + bias2 (y from the f32 a, not from a
//     rounded to T: where apex's second cuBLASLt GEMM reads the T-stored a, f16/bf16 results
//     differ from apex by that one rounding)
//     GELU(h) = 0.5 h (1 + tanh(√(2/π) (h + 0.044715 h³)))   (cuBLASLt's epilogue)
//   linear_gelu_linear_backward (dy [batch, out], x, h, a, weight1, weight2)
//       -> dx, dweight1, dbias1, dweight2, dbias2
//     dweight2 = dyᵀ·a, dbias2 = Σ_rows dy, dA = dy·weight2, dH = dA ⊙ GELU'(h),
//     dbias1 = Σ_rows dH, dweight1 = dHᵀ·x, dx = dH·weight1  (h and a as stored; they need not be
//     consistent: a only feeds dweight2, h only GELU')
//   Non-finite values: a NaN reaches every output its formula touches (a NaN in x's row r: every
//   element of y's row r, every column of dweight).
//   No params.
// Tolerance: a GEMM's f32 sum of K products is off by about u_f32·√K·(the rms of its output) for
// zero-mean data (the errors of the products and partial sums add like a random walk; oneDNN's
// blocking of K changes the order, not that size). Chained GEMMs add their K's: y of
// linear_gelu_linear carries the first GEMM's error through GELU (|GELU'| <= 1.13) into the
// second, so reduce_len is in + hidden; the harness's bound is 2·u_f32·√reduce_len·rms(output),
// plus 2·u_T relative for the output rounding and the perturbation sensitivity of the reference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "opforge/manifest.h"

namespace opf::ops {
namespace {

void describe(CaseDesc& c, const Shape& s, const Params&) {
  if (s.size() != 4) {
    c.unsupported = "fused_dense shapes are [batch, in, hidden, out]";
    return;
  }
  const int64_t b = s[0], in = s[1], hid = s[2], out = s[3];
  const double e = double(dtype_size(c.dtype));
  const double B = double(b), I = double(in), H = double(hid), O = double(out);
  // weights scaled by the fan-in so that h has an rms near 1 (GELU's curved part) at any size
  const double w1 = 3.0 / std::sqrt(double(std::max<int64_t>(in, 1)));
  const double w2 = 3.0 / std::sqrt(double(std::max<int64_t>(hid, 1)));
  const Fill act{Fill::uniform, -1.0, 1.0}, bias{Fill::uniform, -0.5, 0.5};
  if (c.entry == "linear_bias_forward") {
    c.set("x", {b, in}, act);
    c.set("weight", {hid, in}, {Fill::uniform, -w1, w1});
    c.set("bias", {hid}, bias);
    c.set("y", {b, hid});
    c.reduce_len = std::max<int64_t>(in, 1);
    c.bytes = (B * I + H * I + H + B * H) * e;
    c.flops = 2 * B * I * H + B * H;
  } else if (c.entry == "linear_bias_backward") {
    c.set("dy", {b, hid}, act);
    c.set("x", {b, in}, act);
    c.set("weight", {hid, in}, {Fill::uniform, -w1, w1});
    c.set("dx", {b, in});
    c.set("dweight", {hid, in});
    c.set("dbias", {hid});
    c.reduce_len = std::max<int64_t>({b, hid, 1});
    c.bytes = (2 * B * H + 2 * B * I + 2 * H * I + H) * e;
    c.flops = 4 * B * I * H + B * H;
  } else if (c.entry == "linear_gelu_linear_forward") {
    c.set("x", {b, in}, act);
    c.set("weight1", {hid, in}, {Fill::uniform, -w1, w1});
    c.set("bias1", {hid}, bias);
    c.set("weight2", {out, hid}, {Fill::uniform, -w2, w2});
    c.set("bias2", {out}, bias);
    c.set("a", {b, hid});
    c.set("y", {b, out});
    c.set("h", {b, hid});
    c.reduce_len = std::max<int64_t>(in + hid, 1);
    c.bytes = (B * I + H * I + H + O * H + O + 2 * B * H + B * O) * e;
    c.flops = 2 * B * I * H + 2 * B * H * O + 20 * B * H + B * O;
  } else {
    c.set("dy", {b, out}, act);
    c.set("x", {b, in}, act);
    c.set("h", {b, hid}, {Fill::uniform, -3.0, 3.0});
    c.set("a", {b, hid}, act);
    c.set("weight1", {hid, in}, {Fill::uniform, -w1, w1});
    c.set("weight2", {out, hid}, {Fill::uniform, -w2, w2});
    c.set("dx", {b, in});
    c.set("dweight1", {hid, in});
    c.set("dbias1", {hid});
    c.set("dweight2", {out, hid});
    c.set("dbias2", {out});
    c.reduce_len = std::max<int64_t>({out + b, out + hid, 1});
    c.bytes = (2 * B * O + 2 * B * I + 2 * B * H + 2 * H * I + 2 * O * H + H + O) * e;
    c.flops = 4 * B * H * O + 4 * B * I * H + 20 * B * H + B * O;
  }
}

constexpr double kSqrt2OverPi = 0.79788456080286535588;

double gelu(double h) { return 0.5 * h * (1 + std::tanh(kSqrt2OverPi * (h + 0.044715 * h * h * h))); }
double dgelu(double h) {
  const double t = std::tanh(kSqrt2OverPi * (h + 0.044715 * h * h * h));
  return 0.5 * (1 + t) + 0.5 * h * (1 - t * t) * kSqrt2OverPi * (1 + 3 * 0.044715 * h * h);
}

// c[m, n] = a[m, k]·b[n, k]ᵀ (+ bias[n])
void matmul_nt(const double* a, const double* b, const double* bias, double* c, int64_t m, int64_t n, int64_t k) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = bias ? bias[j] : 0.0;
      for (int64_t p = 0; p < k; ++p) s += a[i * k + p] * b[j * k + p];
      c[i * n + j] = s;
    }
}
// c[m, n] = a[m, k]·b[k, n]
void matmul_nn(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k) {
  std::fill(c, c + m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const double v = a[i * k + p];
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += v * b[p * n + j];
    }
}
// c[m, n] = a[k, m]ᵀ·b[k, n]
void matmul_tn(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k) {
  std::fill(c, c + m * n, 0.0);
  for (int64_t p = 0; p < k; ++p)
    for (int64_t i = 0; i < m; ++i) {
      const double v = a[p * m + i];
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += v * b[p * n + j];
    }
}
void column_sums(const double* a, double* out, int64_t rows, int64_t cols) {
  std::fill(out, out + cols, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) out[j] += a[r * cols + j];
}

void reference(std::string_view entry, std::vector<RefArg>& args, const Params&) {
  if (entry == "linear_bias_forward") {
    const auto& x = ref_arg(args, "x");
    const int64_t b = x.desc->shape[0], in = x.desc->shape[1], hid = ref_arg(args, "bias").desc->shape[0];
    matmul_nt(x.v.data(), ref_arg(args, "weight").v.data(), ref_arg(args, "bias").v.data(), ref_arg(args, "y").v.data(),
              b, hid, in);
  } else if (entry == "linear_bias_backward") {
    const auto& dy = ref_arg(args, "dy");
    const auto& x = ref_arg(args, "x");
    const int64_t b = x.desc->shape[0], in = x.desc->shape[1], hid = dy.desc->shape[1];
    matmul_nn(dy.v.data(), ref_arg(args, "weight").v.data(), ref_arg(args, "dx").v.data(), b, in, hid);
    matmul_tn(dy.v.data(), x.v.data(), ref_arg(args, "dweight").v.data(), hid, in, b);
    column_sums(dy.v.data(), ref_arg(args, "dbias").v.data(), b, hid);
  } else if (entry == "linear_gelu_linear_forward") {
    const auto& x = ref_arg(args, "x");
    const int64_t b = x.desc->shape[0], in = x.desc->shape[1];
    const int64_t hid = ref_arg(args, "bias1").desc->shape[0], out = ref_arg(args, "bias2").desc->shape[0];
    auto& h = ref_arg(args, "h").v;
    auto& a = ref_arg(args, "a").v;
    matmul_nt(x.v.data(), ref_arg(args, "weight1").v.data(), ref_arg(args, "bias1").v.data(), h.data(), b, hid, in);
    for (size_t i = 0; i < h.size(); ++i) a[i] = gelu(h[i]);
    matmul_nt(a.data(), ref_arg(args, "weight2").v.data(), ref_arg(args, "bias2").v.data(), ref_arg(args, "y").v.data(),
              b, out, hid);
  } else {
    const auto& dy = ref_arg(args, "dy");
    const auto& x = ref_arg(args, "x");
    const auto& h = ref_arg(args, "h").v;
    const int64_t b = x.desc->shape[0], in = x.desc->shape[1];
    const int64_t hid = ref_arg(args, "h").desc->shape[1], out = dy.desc->shape[1];
    matmul_tn(dy.v.data(), ref_arg(args, "a").v.data(), ref_arg(args, "dweight2").v.data(), out, hid, b);
    column_sums(dy.v.data(), ref_arg(args, "dbias2").v.data(), b, out);
    std::vector<double> dh(size_t(b * hid));
    matmul_nn(dy.v.data(), ref_arg(args, "weight2").v.data(), dh.data(), b, hid, out);
    for (size_t i = 0; i < dh.size(); ++i) dh[i] *= dgelu(h[i]);
    column_sums(dh.data(), ref_arg(args, "dbias1").v.data(), b, hid);
    matmul_tn(dh.data(), x.v.data(), ref_arg(args, "dweight1").v.data(), hid, in, b);
    matmul_nn(dh.data(), ref_arg(args, "weight1").v.data(), ref_arg(args, "dx").v.data(), b, in, hid);
  }
}

}  // namespace

extern const OpSpec fused_dense_spec{describe, nullptr, reference};

}  // namespace opf::ops
