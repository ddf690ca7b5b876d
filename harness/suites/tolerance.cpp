#include "tolerance.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "case_data.h"

namespace opf::suites {

double Tolerance::bound(int64_t i, double r) const {
  return rel * std::fabs(r) + abs + (p && !p->empty() ? sens * (*p)[size_t(i)] : 0.0);
}

Tolerance tolerance_for(const ArgDesc& out, const CaseDesc& c, double kappa, const std::vector<double>& ref,
                        const std::vector<double>* sensitivity, double factor) {
  if (!dtype_is_float(out.dtype)) return {};
  const double u_out = dtype_unit_roundoff(out.dtype);
  const double u_acc = out.dtype == DType::f64 ? dtype_unit_roundoff(DType::f64) : dtype_unit_roundoff(DType::f32);
  const double acc = 2 * u_acc * std::sqrt(double(std::max<int64_t>(c.reduce_len, 1))) * kappa;
  double sq = 0;
  int64_t finite = 0;
  for (double r : ref)
    if (std::isfinite(r)) {
      sq += r * r;
      ++finite;
    }
  const double s = finite ? std::sqrt(sq / double(finite)) : 0;
  Tolerance t;
  t.rel = factor * (2 * u_out + acc);
  t.abs = factor * (acc * s + dtype_min_subnormal(out.dtype));
  t.sens = factor * 8;
  t.p = sensitivity;
  return t;
}

std::string join_dims(const std::vector<int64_t>& dims) {
  std::string r = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d) r += ", ";
    r += std::to_string(dims[d]);
  }
  return r + "]";
}

std::string multi_index(const Shape& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    const int64_t n = shape[d] > 0 ? shape[d] : 1;
    idx[d] = i % n;
    i /= n;
  }
  return join_dims(idx);
}

namespace {

bool is_poison(DType t, const std::byte* base, int64_t i) {
  const size_t e = dtype_size(t);
  std::vector<std::byte> p(e);
  poison(t, p.data(), 1);
  return std::memcmp(base + size_t(i) * e, p.data(), e) == 0;
}

bool element_ok(int64_t i, double k, double r, const Tolerance& tol, bool integer) {
  if (std::isnan(r)) return std::isnan(k);
  if (std::isinf(r)) return k == r;
  if (!std::isfinite(k)) return false;
  if (integer) return k == r;
  return std::fabs(k - r) <= tol.bound(i, r);
}

std::string fmt(double v) {
  char b[48];
  std::snprintf(b, sizeof b, "%.9g", v);
  return b;
}

}  // namespace

Comparison compare(const ArgDesc& out, const std::byte* kb, const std::vector<double>& ref, const Tolerance& tol) {
  Comparison c;
  const bool integer = !dtype_is_float(out.dtype);
  const int64_t n = out.numel();
  double err2 = 0, ref2 = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < n; ++i) {
    const double k = load_element(out.dtype, kb, i), r = ref[size_t(i)];
    if (std::isfinite(k) && std::isfinite(r)) {
      err2 += (k - r) * (k - r);
      ref2 += r * r;
      const double b = tol.bound(i, r);
      c.worst_ratio = std::max(c.worst_ratio, b > 0 ? std::fabs(k - r) / b : (k == r ? 0.0 : INFINITY));
    }
    // a NaN reference needs a NaN the kernel wrote: the poison pattern is a NaN too
    if (!element_ok(i, k, r, tol, integer) || (std::isnan(r) && is_poison(out.dtype, kb, i))) {
      ++c.bad_count;
      if (first < 0) first = i;
    }
  }
  c.nmse = ref2 > 0 ? err2 / ref2 : err2;
  if (first < 0) return c;

  c.ok = false;
  const double k = load_element(out.dtype, kb, first), r = ref[size_t(first)];
  std::ostringstream m;
  m << "output '" << out.name << "' (" << dtype_name(out.dtype) << " " << join_dims(out.shape) << "): " << c.bad_count
    << " of " << n << " elements out of tolerance\n"
    << "  first bad index " << multi_index(out.shape, first) << ": kernel " << fmt(k)
    << (is_poison(out.dtype, kb, first) ? " (poison: never written)" : "") << ", reference " << fmt(r) << ", |diff| "
    << fmt(std::fabs(k - r)) << ", allowed " << fmt(tol.bound(first, r)) << "\n  neighbours (last dim):";
  const int64_t last = out.shape.empty() ? 1 : std::max<int64_t>(out.shape.back(), 1);
  const int64_t row0 = first - first % last;
  for (int64_t j = std::max(row0, first - 2); j <= std::min(row0 + last - 1, first + 2); ++j)
    m << "\n    " << multi_index(out.shape, j) << " kernel " << fmt(load_element(out.dtype, kb, j)) << " ref "
      << fmt(ref[size_t(j)])
      << (element_ok(j, load_element(out.dtype, kb, j), ref[size_t(j)], tol, integer) ? "" : "  <- bad");
  m << "\n  nmse " << fmt(c.nmse) << ", worst err/allowed " << fmt(c.worst_ratio) << ", tolerance rel " << fmt(tol.rel)
    << " abs " << fmt(tol.abs) << " + " << fmt(tol.sens) << " x sensitivity "
    << fmt(tol.p && !tol.p->empty() ? (*tol.p)[size_t(first)] : 0.0);
  c.first_bad = m.str();
  return c;
}

}  // namespace opf::suites
