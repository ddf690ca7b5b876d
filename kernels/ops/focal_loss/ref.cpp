// focal_loss — float64 reference and case description (NVIDIA apex's focal_loss_cuda, the fused
// sigmoid focal loss of apex.contrib.focal_loss, RetinaNet/EfficientDet's classification loss).
//
// Contract (shape [N, Cpad]: N rows (anchors) of Cpad class logits; T = f32 | f16 | bf16 storage,
// f32 accumulation; K = num_real_classes, s = label_smoothing):
//   forward (logits: T [N,Cpad], labels: i64 [N], num_positives_sum: f32 [1])
//       -> (loss: f32 [1], partial_grad: T [N,Cpad])
//     per element of a row with label y, class c < K (x = the logit, p = sigmoid(x)):
//       positive (c == y): t = 1 - s/2, w = alpha (1-p)^gamma
//       negative (c != y): t = s/2,     w = (1-alpha) p^gamma
//       BCE = t softplus(-x) + (1-t) softplus(x)   (= log(1+e^-x) + (1-t) x)
//       loss term = w BCE
//       partial_grad = d(w BCE)/dx = w (gamma (1-p) BCE + p - t)   negative
//                                  = w (-gamma p BCE + p - t)      positive
//     loss = sum of the loss terms / num_positives_sum (one f32 [1]).
//     Rows with label -2 are ignored: no loss, partial_grad 0. Label -1: no positive (every real
//     class is a negative). Padding classes (c >= K): no loss, partial_grad 0. These zeros are exact
//     whatever the logits hold (NaN included), as apex writes them without reading the logit.
//     partial_grad is stored in T unnormalized (apex keeps it for backward, in the input dtype).
//     gamma = 0, 1, 2 are evaluated as 1, u, u*u (u = the base of the power); other gammas as
//     exp(gamma log u). 0^0 = 1.
//   backward (grad_loss: f32 [1], partial_grad: T [N,Cpad] inout, num_positives_sum: f32 [1])
//     partial_grad *= grad_loss / num_positives_sum, in place (apex's backward is in place).
//   Non-finite logits: a NaN or +-inf logit of a real class in a non-ignored row makes its
//     partial_grad element and the loss NaN (apex: NaN for NaN, mostly NaN for inf through
//     inf - inf and 0 * inf); nothing else changes.
//   Labels must be in [-2, K): otherwise the call fails with one line naming the first bad row
//     before anything is written. Cpad must be a multiple of 16 bytes of T (4 f32, 8 f16/bf16) and
//     16 bytes of T <= K <= Cpad (apex's checks: 128-bit loads of whole vectors of classes).
//   N = 0 is valid: loss 0 (an empty sum).
//   The loss sum is deterministic: the same bits for any thread count (apex's float atomicAdd is
//     not).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "opforge/error.h"
#include "opforge/manifest.h"

namespace opf::ops {
namespace {

// Classes per 16 bytes of storage: apex's padding unit (ILP of its 128-bit loads).
int64_t padding_unit(DType t) { return 16 / int64_t(dtype_size(t)); }

void describe(CaseDesc& c, const Shape& s, const Params& p) {
  if (s.size() != 2) {
    c.unsupported = "focal_loss shapes are [N, Cpad]";
    return;
  }
  const int64_t rows = s[0], cols = s[1], k = p.get_int("num_real_classes"), unit = padding_unit(c.dtype);
  if (cols % unit != 0 || k > cols || k < unit) {
    c.unsupported = "focal_loss needs Cpad a multiple of " + std::to_string(unit) + " and " + std::to_string(unit) +
                    " <= num_real_classes <= Cpad (here Cpad " + std::to_string(cols) + ", num_real_classes " +
                    std::to_string(k) + ")";
    return;
  }
  const double e = double(dtype_size(c.dtype)), n = double(rows) * double(cols);
  if (c.entry == "forward") {
    // detection-like logits: mostly negative (a prior of ~1% positives), a tail into the positives
    c.set("logits", {rows, cols}, {Fill::uniform, -8.0, 4.0});
    c.set("labels", {rows}, {Fill::index, -2.0, double(k)}, true);  // planted by prepare()
    c.set("num_positives_sum", {1}, {Fill::uniform, 1.0, 64.0});
    c.set("loss", {1});
    c.set("partial_grad", {rows, cols});
    c.reduce_len = std::max<int64_t>(1, rows * k);  // the loss sums every real element
    c.bytes = 2 * n * e + 8.0 * double(rows);       // logits in, gradient out, labels
    c.flops = 40 * double(rows) * double(k);        // exp, log1p, a division, the weights
  } else {
    c.set("grad_loss", {1}, {Fill::uniform, 0.5, 2.0});
    c.set("partial_grad", {rows, cols}, {Fill::uniform, -1.0, 1.0});
    c.set("num_positives_sum", {1}, {Fill::uniform, 1.0, 64.0});
    c.reduce_len = 1;
    c.bytes = 2 * n * e;
    c.flops = n;
  }
}

// A uniform [0, 1) number determined by a drawn value and its position (splitmix64 of its bits):
// the planted labels inherit the case's seed through the logits.
double uniform_from(double v, int64_t i) {
  uint64_t z;
  std::memcpy(&z, &v, sizeof z);
  z += 0x9e3779b97f4a7c15ull * uint64_t(i + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return double(z >> 11) * 0x1p-53;
}

// Labels: row 1 and rows % 8 == 5 ignored (-2), rows % 8 == 2 without a positive (-1), the others
// a class in [0, K) seeded by the row's first logit (its last real class K-1 included).
void prepare(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (entry != "forward") return;
  const RefArg& logits = ref_arg(a, "logits");
  RefArg& labels = ref_arg(a, "labels");
  const int64_t rows = logits.desc->shape[0], cols = logits.desc->shape[1], k = p.get_int("num_real_classes");
  for (int64_t r = 0; r < rows; ++r) {
    double y;
    if (r == 1 || r % 8 == 5) y = -2;
    else if (r % 8 == 2) y = -1;
    else if (r % 8 == 7) y = double(k - 1);
    else y = double(std::min(k - 1, int64_t(uniform_from(logits.v[size_t(r * cols)], r) * double(k))));
    labels.v[size_t(r)] = y;
  }
}

double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

void reference(std::string_view entry, std::vector<RefArg>& a, const Params& p) {
  if (entry == "backward") {
    const double g = ref_arg(a, "grad_loss").v[0], np = ref_arg(a, "num_positives_sum").v[0];
    for (double& v : ref_arg(a, "partial_grad").v) v = v * g / np;
    return;
  }
  const int64_t k = p.get_int("num_real_classes");
  const double alpha = p.get("alpha"), gamma = p.get("gamma"), s = p.get("label_smoothing");
  const RefArg& logits = ref_arg(a, "logits");
  const auto& labels = ref_arg(a, "labels").v;
  auto& grad = ref_arg(a, "partial_grad").v;
  const int64_t rows = logits.desc->shape[0], cols = logits.desc->shape[1];
  const auto power = [&](double u) { return gamma == 0 ? 1.0 : std::pow(u, gamma); };
  double sum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t y = int64_t(labels[size_t(r)]);
    if (y < -2 || y >= k)
      throw Error("focal_loss reference: labels[" + std::to_string(r) + "] = " + std::to_string(y) +
                  " is outside [-2, " + std::to_string(k) + ")");
    for (int64_t c = 0; c < cols; ++c) {
      double& g = grad[size_t(r * cols + c)];
      if (y == -2 || c >= k) {
        g = 0;
        continue;
      }
      const double x = logits.v[size_t(r * cols + c)];
      if (!std::isfinite(x)) {
        g = sum = std::nan("");
        continue;
      }
      const double pr = 1 / (1 + std::exp(-x)), q = 1 / (1 + std::exp(x));  // p and 1 - p, each accurate
      const bool pos = c == y;
      const double t = pos ? 1 - s / 2 : s / 2;
      const double bce = t * softplus(-x) + (1 - t) * softplus(x);
      const double w = pos ? alpha * power(q) : (1 - alpha) * power(pr);
      sum += w * bce;
      g = pos ? w * (-gamma * pr * bce + pr - t) : w * (gamma * q * bce + pr - t);
    }
  }
  ref_arg(a, "loss").v[0] = sum / ref_arg(a, "num_positives_sum").v[0];
}

}  // namespace

extern const OpSpec focal_loss_spec{describe, prepare, reference};

}  // namespace opf::ops
