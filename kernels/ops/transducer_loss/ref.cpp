// transducer_loss — float64 reference and case description (NVIDIA apex's transducer_loss_cuda,
// the RNN-T loss of apex.contrib.transducer.TransducerLoss).
//
// Contract (shape [B, T, U1, V]; T = f32 | f16 | bf16 storage, f32 accumulation):
//   Per batch b: Tf = f_len[b] in [1, T], Uy = y_len[b] in [0, U1 - 1], labels y_u = label[b, u]
//   (u < Uy; entries past Uy are padding and never read), blank = blank_idx in [0, V).
//   lp(t, u, v) = x[b, t, u, v], the log-probs (Python applies log_softmax first).
//   forward (x, label, f_len, y_len, batch_offset) -> (alpha, beta: acc [B, T, U1], loss: acc [B])
//     alpha(0,0) = 0, alpha(t,0) = alpha(t-1,0) + lp(t-1,0,blank), alpha(0,u) = alpha(0,u-1) + lp(0,u-1,y_u)
//     alpha(t,u) = logaddexp(alpha(t-1,u) + lp(t-1,u,blank), alpha(t,u-1) + lp(t,u-1,y_u))
//     beta(Tf-1,Uy) = lp(Tf-1,Uy,blank), beta(t,Uy) = beta(t+1,Uy) + lp(t,Uy,blank),
//     beta(Tf-1,u) = beta(Tf-1,u+1) + lp(Tf-1,u,y_u),
//     beta(t,u) = logaddexp(beta(t+1,u) + lp(t,u,blank), beta(t,u+1) + lp(t,u,y_u))
//     loss = -beta(0,0). Lattice cells outside t < Tf, u <= Uy are written -inf (log of "no path";
//     apex leaves them uninitialised).
//   backward (x, loss_grad, alpha, beta, f_len, y_len, label, batch_offset) -> x_grad: T, x's shape
//     with g = loss_grad[b], L = beta(0,0) (the saved beta), per cell (t, u) of the lattice:
//       blank edge  e_b = exp(alpha(t,u) + beta(t+1,u) + lp(t,u,blank) - L)   (t < Tf-1)
//                       = exp(alpha(t,u) + lp(t,u,blank) - L)                   (t = Tf-1, u = Uy: the final blank)
//                       = 0                                                     (t = Tf-1, u < Uy: leaves the lattice)
//       label edge  e_y = exp(alpha(t,u) + beta(t,u+1) + lp(t,u,y_u) - L)       (u < Uy), else 0
//     fuse_softmax_backward = false: x_grad(t,u,v) = -g (e_b [v = blank] + e_y [v = y_u])  (d loss / d lp)
//     fuse_softmax_backward = true:  x_grad(t,u,v) = g (exp(alpha(t,u) + beta(t,u) - L + lp(t,u,v))
//                                                       - e_b [v = blank] - e_y [v = y_u])
//       (d loss / d logits where x = log_softmax(logits): the occupancy of the cell times softmax,
//       minus the edge occupancies). A label equal to blank is allowed: both edges land on it.
//     Padding (t >= Tf or u > Uy; unpacked x only): exactly 0, whatever x holds there.
//   packed_input: x (and x_grad) are [sum_b Tf_b (Uy_b + 1), V], batch b's rows starting at
//     batch_offset[b - 1] (0 for b = 0), row t (Uy + 1) + u; batch_offset[b] must be exactly the
//     inclusive running total (so non-decreasing, last = x's row count). Unpacked: batch_offset is [0].
//   NaN: a NaN lp on an edge of batch b's lattice makes its alpha/beta cells downstream NaN, its
//     loss NaN and (through the NaN beta(0,0)) its whole gradient NaN except the exact zeros of
//     the unfused gradient and of padding; other batches are unaffected. logaddexp(-inf, -inf) = -inf.
//   Bad input (one line naming the argument, nothing written): f_len outside [1, T], y_len outside
//     [0, U1 - 1], a used label outside [0, V), blank_idx outside [0, V), batch_offset not the
//     running total, x's row count not batch_offset[B-1] (packed).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::ops {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// The lengths the suites use for shape [B, T, U1]: every lattice corner case in the first three
// batches (full; one frame with every label; no label over every frame), then mixed lengths.
void lengths_for(int64_t b, int64_t T, int64_t U1, int64_t& f_len, int64_t& y_len) {
  const int64_t U = U1 - 1;
  if (b == 0) f_len = T, y_len = U;
  else if (b == 1) f_len = 1, y_len = U;
  else if (b == 2) f_len = T, y_len = 0;
  else f_len = 1 + (b * 7 + T / 2) % T, y_len = (b * 5 + 1) % (U + 1);
}

int64_t packed_rows(int64_t B, int64_t T, int64_t U1) {
  int64_t n = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t f, y;
    lengths_for(b, T, U1, f, y);
    n += f * (y + 1);
  }
  return n;
}

void describe(CaseDesc& c, const Shape& s, const Params& p) {
  if (s.size() != 4 || s[0] < 1 || s[1] < 1 || s[2] < 1 || s[3] < 1) {
    c.unsupported = "transducer_loss shapes are [B, T, U1, V], each >= 1";
    return;
  }
  const int64_t B = s[0], T = s[1], U1 = s[2], V = s[3];
  if (p.get_int("blank_idx") >= V) {
    c.unsupported = "blank_idx is not below V";
    return;
  }
  const bool packed = p.flag("packed_input");
  const int64_t rows = packed ? packed_rows(B, T, U1) : B * T * U1;
  const Shape xs = packed ? Shape{rows, V} : Shape{B, T, U1, V};
  const double e = double(dtype_size(c.dtype)), cells = double(B * T * U1), n = double(rows) * double(V);
  // log-probs: negative, like log_softmax's output
  c.set("x", xs, {Fill::uniform, -4.0, -0.05});
  c.set("label", {B, U1 - 1}, {Fill::index, 0.0, double(V)});
  c.set("f_len", {B}, {}, true);
  c.set("y_len", {B}, {}, true);
  c.set("batch_offset", {packed ? B : 0}, {}, true);
  c.reduce_len = T + U1;  // a lattice path sums T + U1 - 1 terms
  if (c.entry == "forward") {
    c.set("alpha", {B, T, U1});
    c.set("beta", {B, T, U1});
    c.set("loss", {B});
    c.bytes = cells * (2 * e + 8);  // two log-probs read per cell, alpha and beta written
    c.flops = cells * 2 * 12;       // two logaddexp (exp, log1p) per cell
  } else {
    c.set("loss_grad", {B}, {Fill::uniform, -2.0, 2.0});
    c.set("alpha", {B, T, U1}, {}, true);
    c.set("beta", {B, T, U1}, {}, true);
    c.set("x_grad", xs);
    const bool fused = p.flag("fuse_softmax_backward");
    c.bytes = (fused ? 2 : 1) * n * e + cells * 8;  // (x read,) x_grad written; alpha and beta
    c.flops = fused ? 3 * n : cells * 8;
  }
}

double logaddexp(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return a + b;
  if (a == kNegInf) return b;
  if (b == kNegInf) return a;
  return std::max(a, b) + std::log1p(std::exp(-std::fabs(a - b)));
}

// One batch's view of the inputs.
struct Batch {
  int64_t Tf, Uy, V, blank;
  const double* x;  // row (t, u) at x + row(t, u) * V
  int64_t row_t;    // row stride of t (U1 unpacked, Uy + 1 packed)
  const double* label;
  double lp(int64_t t, int64_t u, int64_t v) const { return x[(t * row_t + u) * V + v]; }
  int64_t y(int64_t u) const { return int64_t(label[u]); }
};

struct Lattice {
  int64_t B = 0, T = 0, U1 = 0, V = 0;
  bool packed = false;
  std::vector<int64_t> f_len, y_len, start;
};

Lattice lattice(std::vector<RefArg>& a, const Params& p) {
  Lattice L;
  const ArgDesc& alpha = *ref_arg(a, "alpha").desc;
  L.B = alpha.shape[0], L.T = alpha.shape[1], L.U1 = alpha.shape[2];
  L.V = ref_arg(a, "x").desc->shape.back();
  L.packed = p.flag("packed_input");
  const auto& f = ref_arg(a, "f_len").v;
  const auto& y = ref_arg(a, "y_len").v;
  int64_t at = 0;
  for (int64_t b = 0; b < L.B; ++b) {
    L.f_len.push_back(int64_t(f[size_t(b)]));
    L.y_len.push_back(int64_t(y[size_t(b)]));
    if (L.f_len.back() < 1 || L.f_len.back() > L.T || L.y_len.back() < 0 || L.y_len.back() >= L.U1)
      throw Error("transducer_loss reference: lengths of batch " + std::to_string(b) + " are out of range");
    L.start.push_back(L.packed ? at : b * L.T * L.U1);
    at += L.f_len.back() * (L.y_len.back() + 1);
  }
  return L;
}

Batch batch(const Lattice& L, std::vector<RefArg>& args, int64_t b, int64_t blank) {
  Batch m{L.f_len[size_t(b)], L.y_len[size_t(b)], L.V, blank, nullptr, 0, nullptr};
  m.x = ref_arg(args, "x").v.data() + L.start[size_t(b)] * L.V;
  m.row_t = L.packed ? m.Uy + 1 : L.U1;
  m.label = ref_arg(args, "label").v.data() + b * (L.U1 - 1);
  for (int64_t u = 0; u < m.Uy; ++u)
    if (m.y(u) < 0 || m.y(u) >= L.V) throw Error("transducer_loss reference: a label is outside [0, V)");
  return m;
}

void forward(const Lattice& L, std::vector<RefArg>& a, int64_t blank) {
  auto& alpha = ref_arg(a, "alpha").v;
  auto& beta = ref_arg(a, "beta").v;
  auto& loss = ref_arg(a, "loss").v;
  std::fill(alpha.begin(), alpha.end(), kNegInf);
  std::fill(beta.begin(), beta.end(), kNegInf);
  for (int64_t b = 0; b < L.B; ++b) {
    const Batch m = batch(L, a, b, blank);
    double* al = alpha.data() + b * L.T * L.U1;
    double* be = beta.data() + b * L.T * L.U1;
    const auto A = [&](int64_t t, int64_t u) -> double& { return al[t * L.U1 + u]; };
    const auto Bt = [&](int64_t t, int64_t u) -> double& { return be[t * L.U1 + u]; };
    for (int64_t t = 0; t < m.Tf; ++t)
      for (int64_t u = 0; u <= m.Uy; ++u) {
        if (t == 0 && u == 0) A(t, u) = 0;
        else if (t == 0) A(t, u) = A(t, u - 1) + m.lp(t, u - 1, m.y(u - 1));
        else if (u == 0) A(t, u) = A(t - 1, u) + m.lp(t - 1, u, blank);
        else A(t, u) = logaddexp(A(t - 1, u) + m.lp(t - 1, u, blank), A(t, u - 1) + m.lp(t, u - 1, m.y(u - 1)));
      }
    for (int64_t t = m.Tf - 1; t >= 0; --t)
      for (int64_t u = m.Uy; u >= 0; --u) {
        const bool last_t = t == m.Tf - 1, last_u = u == m.Uy;
        if (last_t && last_u) Bt(t, u) = m.lp(t, u, blank);
        else if (last_t) Bt(t, u) = Bt(t, u + 1) + m.lp(t, u, m.y(u));
        else if (last_u) Bt(t, u) = Bt(t + 1, u) + m.lp(t, u, blank);
        else Bt(t, u) = logaddexp(Bt(t + 1, u) + m.lp(t, u, blank), Bt(t, u + 1) + m.lp(t, u, m.y(u)));
      }
    loss[size_t(b)] = -Bt(0, 0);
  }
}

void backward(const Lattice& L, std::vector<RefArg>& a, int64_t blank, bool fused) {
  const auto& alpha = ref_arg(a, "alpha").v;
  const auto& beta = ref_arg(a, "beta").v;
  const auto& grad = ref_arg(a, "loss_grad").v;
  auto& dx = ref_arg(a, "x_grad").v;
  std::fill(dx.begin(), dx.end(), 0.0);
  for (int64_t b = 0; b < L.B; ++b) {
    const Batch m = batch(L, a, b, blank);
    const double* al = alpha.data() + b * L.T * L.U1;
    const double* be = beta.data() + b * L.T * L.U1;
    const double g = grad[size_t(b)], total = be[0];
    for (int64_t t = 0; t < m.Tf; ++t)
      for (int64_t u = 0; u <= m.Uy; ++u) {
        const double at = al[t * L.U1 + u];
        double eb = 0, ey = 0;
        if (t < m.Tf - 1) eb = std::exp(at + be[(t + 1) * L.U1 + u] + m.lp(t, u, blank) - total);
        else if (u == m.Uy) eb = std::exp(at + m.lp(t, u, blank) - total);
        if (u < m.Uy) ey = std::exp(at + be[t * L.U1 + u + 1] + m.lp(t, u, m.y(u)) - total);
        double* d = dx.data() + (L.start[size_t(b)] + t * m.row_t + u) * L.V;
        const double occ = at + be[t * L.U1 + u] - total;
        for (int64_t v = 0; v < L.V; ++v) {
          double e = fused ? std::exp(occ + m.lp(t, u, v)) : 0.0;
          if (v == blank) e -= eb;
          if (u < m.Uy && v == m.y(u)) e -= ey;
          d[v] = g * e;
        }
      }
  }
}

void prepare(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const RefArg& alpha = ref_arg(a, "alpha");
  const int64_t B = alpha.desc->shape[0], T = alpha.desc->shape[1], U1 = alpha.desc->shape[2];
  auto& f = ref_arg(a, "f_len").v;
  auto& y = ref_arg(a, "y_len").v;
  auto& off = ref_arg(a, "batch_offset").v;
  int64_t total = 0;
  for (int64_t b = 0; b < B; ++b) {
    int64_t fl, yl;
    lengths_for(b, T, U1, fl, yl);
    f[size_t(b)] = double(fl);
    y[size_t(b)] = double(yl);
    total += fl * (yl + 1);
    if (!off.empty()) off[size_t(b)] = double(total);
  }
  if (entry != "backward") return;
  // the saved alpha and beta, as the forward stores them (f32)
  std::vector<RefArg> fw = a;
  const Lattice L = lattice(fw, p);
  std::vector<ArgDesc> extra(1);
  extra[0].name = "loss";
  extra[0].shape = {B};
  RefArg loss{&extra[0], std::vector<double>(size_t(B))};
  fw.push_back(loss);
  forward(L, fw, p.get_int("blank_idx"));
  for (const char* name : {"alpha", "beta"}) {
    auto& dst = ref_arg(a, name).v;
    const auto& src = ref_arg(fw, name).v;
    for (size_t i = 0; i < dst.size(); ++i) dst[i] = double(float(src[i]));
  }
}

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  const Lattice L = lattice(a, p);
  const int64_t blank = p.get_int("blank_idx");
  if (blank < 0 || blank >= L.V) throw Error("transducer_loss reference: blank_idx is outside [0, V)");
  if (entry == "forward") forward(L, a, blank);
  else backward(L, a, blank, p.flag("fuse_softmax_backward"));
}

}  // namespace

extern const OpSpec transducer_loss_spec{describe, prepare, reference};

}  // namespace opf::ops
