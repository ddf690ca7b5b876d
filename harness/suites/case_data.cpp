#include "case_data.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "opforge/error.h"
#include "seed.h"

namespace opf::suites {

std::string_view variant_name(Variant v) {
  switch (v) {
    case Variant::random: return "random";
    case Variant::offset: return "offset";
    case Variant::small: return "small";
    case Variant::large: return "large";
    case Variant::nan: return "nan";
  }
  return "?";
}

const std::vector<Variant>& all_variants() {
  static const std::vector<Variant> v{Variant::random, Variant::offset, Variant::small, Variant::large, Variant::nan};
  return v;
}

bool dtype_is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64; }

double dtype_max_finite(DType t) {
  switch (t) {
    case DType::f32: return std::numeric_limits<float>::max();
    case DType::f16: return 65504.0;
    case DType::bf16: return 0x1.fep127;
    case DType::f64: return std::numeric_limits<double>::max();
    default: return 0;
  }
}

double dtype_min_subnormal(DType t) {
  switch (t) {
    case DType::f32: return 0x1p-149;
    case DType::f16: return 0x1p-24;
    case DType::bf16: return 0x1p-133;
    case DType::f64: return 0x1p-1074;
    default: return 0;
  }
}

void poison(DType t, std::byte* base, int64_t n) {
  switch (t) {
    case DType::f32: {
      const uint32_t p = 0x7fc0dead;
      for (int64_t i = 0; i < n; ++i) std::memcpy(base + 4 * i, &p, 4);
      return;
    }
    case DType::f16: {
      const uint16_t p = 0x7e5a;
      for (int64_t i = 0; i < n; ++i) std::memcpy(base + 2 * i, &p, 2);
      return;
    }
    case DType::bf16: {
      const uint16_t p = 0x7fc5;
      for (int64_t i = 0; i < n; ++i) std::memcpy(base + 2 * i, &p, 2);
      return;
    }
    case DType::f64: {
      const uint64_t p = 0x7ff8deadbeef0000ull;
      for (int64_t i = 0; i < n; ++i) std::memcpy(base + 8 * i, &p, 8);
      return;
    }
    default: std::memset(base, 0xA5, size_t(n) * dtype_size(t)); return;
  }
}

namespace {

struct Range {
  double lo, hi;
};

Range transform(const Fill& f, Variant v, DType t) {
  const double w = f.hi - f.lo;
  switch (v) {
    case Variant::random:
    case Variant::nan: return {f.lo, f.hi};
    case Variant::offset: return {f.lo + 64 * w, f.hi + 64 * w};
    case Variant::small: return {f.lo * 0x1p-10, f.hi * 0x1p-10};
    case Variant::large: {
      const double m = t == DType::f16 ? 0x1p6 : 0x1p20;
      return {f.lo * m, f.hi * m};
    }
  }
  return {f.lo, f.hi};
}

// rms / std of a uniform [lo, hi]: how much a reduction that cancels the mean amplifies rounding
// errors relative to the result (1 for zero-mean data).
double conditioning(Range r) {
  const double mean = 0.5 * (r.lo + r.hi), sd = (r.hi - r.lo) / std::sqrt(12.0);
  if (!(sd > 0)) return 1;
  return std::max(1.0, std::sqrt(mean * mean + sd * sd) / sd);
}

void draw_arg(HostArg& h, Variant variant, Rng& rng, double& kappa) {
  const ArgDesc& a = *h.desc;
  const int64_t n = a.numel();
  std::byte* p = h.bytes.data();
  if (a.fill.kind == Fill::mask) {
    for (int64_t i = 0; i < n; ++i) store_element(a.dtype, p, i, rng.uniform() < a.fill.p ? 1.0 : 0.0);
    return;
  }
  if (a.fill.kind == Fill::index) {  // integers in [lo, hi): labels, indices (0 is a valid index)
    const int64_t lo = int64_t(a.fill.lo), span = std::max<int64_t>(1, int64_t(a.fill.hi) - lo);
    for (int64_t i = 0; i < n; ++i) store_element(a.dtype, p, i, double(lo + int64_t(rng.next() % uint64_t(span))));
    return;
  }
  const Range r = transform(a.fill, variant, a.dtype);
  kappa = std::max(kappa, conditioning(r));
  for (int64_t i = 0; i < n; ++i) {
    // Never a stored zero: it hides sign and scaling bugs. A range straddling 0 makes a draw
    // that rounds to 0 rare; redraw it.
    for (int tries = 0;; ++tries) {
      store_element(a.dtype, p, i, r.lo + (r.hi - r.lo) * rng.uniform());
      if (load_element(a.dtype, p, i) != 0) break;
      if (tries == 64)
        throw Error("argument '" + a.name + "': fill range [" + std::to_string(r.lo) + ", " + std::to_string(r.hi) +
                    "] keeps rounding to 0");
    }
  }
}

// One NaN at a random position of every 4th row (rows = the last dim), so that rows without
// one show whether a NaN leaks beyond where the reference puts it.
void inject_nans(HostArg& h, Rng& rng) {
  const ArgDesc& a = *h.desc;
  const int64_t n = a.numel(), len = a.shape.empty() ? 1 : std::max<int64_t>(a.shape.back(), 1);
  for (int64_t row = 0; row * len < n; row += 4)
    store_element(a.dtype, h.bytes.data(), row * len + int64_t(rng.next() % uint64_t(len)), std::nan(""));
}

std::vector<double> read_back(const HostArg& h) {
  const int64_t n = h.desc->numel();
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = load_element(h.desc->dtype, h.bytes.data(), i);
  return v;
}

// Element i's signs in the kSignDraws draws: bit d of its code is draw d's sign, and the last draw
// scales every element by 1 + u. Within a block of 256 elements the codes are an affine bijection
// of the offset (random odd multiplier and shift), so two elements less than 256 apart differ in
// some draw's sign and share it in the last; each block is XORed with its own random mask, so
// elements of different blocks differ as independent random signs would.
constexpr int kSignDraws = 9;
std::vector<uint8_t> sign_codes(size_t n, Rng& rng) {
  const uint64_t mul = rng.next() | 1, add = rng.next();
  std::vector<uint8_t> codes(n);
  uint8_t mask = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i % 256 == 0) mask = uint8_t(rng.next());
    codes[i] = uint8_t(uint8_t(mul * (i % 256) + add) ^ mask);
  }
  return codes;
}

// How much each reference output moves when the stored inputs are as uncertain as an f32
// kernel's view of them: per floating input argument, reference runs with that argument's
// elements scaled by (1 +- u_acc), the largest |change| of kSignDraws sign draws, summed over the
// arguments (perturbing one argument at a time keeps x*(1+u) and rstd*(1-u) from cancelling each
// other). Several draws keep one lucky draw, where the perturbations of two dominant elements
// cancel, from hiding an output's real sensitivity: independent random signs left 1 pair in 2^8
// with the same relative sign in every draw (transducer_loss's blank-edge gradient,
// g exp(beta(1,0) + lp - beta(0,0)), failed CI that way), sign_codes leaves none among near
// elements. Catches ill-conditioning the op cannot declare up front: an output that cancels to
// ~0, e.g. rms_norm's dx for a single column, where rstd is an input consistent with x.
std::vector<std::vector<double>> sensitivity(const OpInfo& op, std::string_view entry,
                                             const std::vector<RefArg>& inputs, const std::vector<RefArg>& ref,
                                             const Params& params, DType dtype, Rng& rng) {
  const double u = dtype == DType::f64 ? dtype_unit_roundoff(DType::f64) : dtype_unit_roundoff(DType::f32);
  std::vector<std::vector<double>> sens(ref.size());
  for (size_t i = 0; i < ref.size(); ++i)
    if (ref[i].desc->role != Role::in) sens[i].assign(ref[i].v.size(), 0.0);
  // A list argument is one argument: its elements are perturbed together, in one reference run
  // (one run per element would cost list length x a whole reference).
  for (size_t k = 0, next = 0; k < inputs.size(); k = next) {
    const ArgDesc& in = *inputs[k].desc;
    next = k + 1;
    if (in.list_index >= 0)
      while (next < inputs.size() && inputs[next].desc->name == in.name) ++next;
    if (in.role == Role::out || !dtype_is_float(in.dtype) || in.fill.kind != Fill::uniform) continue;
    std::vector<std::vector<double>> worst(ref.size());
    for (size_t i = 0; i < ref.size(); ++i) worst[i].assign(sens[i].size(), 0.0);
    size_t elements = 0;
    for (size_t e = k; e < next; ++e) elements += inputs[e].v.size();
    const std::vector<uint8_t> codes = sign_codes(elements, rng);
    for (int draw = 0; draw < kSignDraws; ++draw) {
      std::vector<RefArg> p = inputs;
      size_t at = 0;
      for (size_t e = k; e < next; ++e)
        for (double& x : p[e].v) {
          const bool plus = draw == kSignDraws - 1 || (codes[at] >> draw & 1);
          x *= 1 + (plus ? u : -u);
          ++at;
        }
      for (RefArg& a : p)
        if (a.desc->role == Role::out) std::fill(a.v.begin(), a.v.end(), std::nan(""));
      op.spec->reference(entry, p, params);
      for (size_t i = 0; i < ref.size(); ++i)
        for (size_t j = 0; j < sens[i].size(); ++j) {
          const double d = std::fabs(p[i].v[j] - ref[i].v[j]);
          if (std::isfinite(d)) worst[i][j] = std::max(worst[i][j], d);
        }
    }
    for (size_t i = 0; i < ref.size(); ++i)
      for (size_t j = 0; j < sens[i].size(); ++j) sens[i][j] += worst[i][j];
  }
  return sens;
}

}  // namespace

size_t host_bytes(const DrawnCase& c) {
  size_t n = 0;
  for (const HostArg& h : c.host) n += h.bytes.size();
  return n;
}

DrawnCase draw_case(const OpInfo& op, std::string_view entry, DType dtype, const Shape& shape, Variant variant,
                    uint64_t seed, bool with_reference, const Params* given) {
  DrawnCase c;
  c.params = given ? *given : op.default_params();
  const Params& params = c.params;
  c.desc = describe_case(op, entry, dtype, shape, params);
  if (!c.desc.unsupported.empty()) return c;
  // arguments of the entry, not tensors: a list argument may hold thousands of elements
  if (std::count_if(c.desc.args.begin(), c.desc.args.end(), [](const ArgDesc& a) { return a.list_index <= 0; }) > 64)
    throw Error(op.name + ": too many arguments");

  Rng rng(seed);
  bool any_derived = false, nan_placed = variant != Variant::nan;
  c.host.resize(c.desc.args.size());
  for (size_t i = 0; i < c.desc.args.size(); ++i) {
    const ArgDesc& a = c.desc.args[i];
    if (a.shape.size() > OPF_MAX_DIMS)
      throw Error(op.name + ": argument '" + a.name + "' has more than OPF_MAX_DIMS dims");
    HostArg& h = c.host[i];
    h.desc = &a;
    h.bytes.resize(size_t(a.numel()) * dtype_size(a.dtype));
    if (a.role == Role::out) {
      poison(a.dtype, h.bytes.data(), a.numel());
    } else if (a.derived) {
      any_derived = true;
    } else {
      draw_arg(h, variant, rng, c.kappa);
      if (!nan_placed && dtype_is_float(a.dtype) && a.fill.kind == Fill::uniform && a.numel() > 0) {
        inject_nans(h, rng);
        nan_placed = true;
      }
    }
  }
  if (!with_reference && !(any_derived && op.spec->prepare)) return c;

  c.ref.resize(c.host.size());
  for (size_t i = 0; i < c.host.size(); ++i) {
    const ArgDesc& a = c.desc.args[i];
    c.ref[i].desc = &a;
    if (a.role != Role::out || a.derived) {
      c.ref[i].v = a.derived ? std::vector<double>(size_t(a.numel()), std::nan("")) : read_back(c.host[i]);
    } else if (with_reference) {
      // NaN until the reference writes it: a reference that skips an element cannot pass.
      c.ref[i].v.assign(size_t(a.numel()), std::nan(""));
    }
  }
  if (op.spec->prepare) op.spec->prepare(entry, c.ref, params);
  for (size_t i = 0; i < c.host.size(); ++i) {
    const ArgDesc& a = c.desc.args[i];
    if (!a.derived) continue;
    for (int64_t j = 0; j < a.numel(); ++j) store_element(a.dtype, c.host[i].bytes.data(), j, c.ref[i].v[size_t(j)]);
    c.ref[i].v = read_back(c.host[i]);
  }
  if (with_reference) {
    const std::vector<RefArg> inputs = c.ref;  // inout values are overwritten by reference()
    op.spec->reference(entry, c.ref, params);
    c.sensitivity = sensitivity(op, entry, inputs, c.ref, params, dtype, rng);
  } else {
    c.ref.clear();
    c.ref.shrink_to_fit();
  }
  return c;
}

}  // namespace opf::suites
