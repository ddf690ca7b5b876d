// The CPU JIT's precompiled header: the system headers the CPU op modules parse (every module, or
// a costly one some do), which are most of a cold JIT compile's front-end time (Highway alone is
// ~7 MB of headers). Meson
// compiles it (opf_jit_pch, kernels/meson.build) with exactly the JIT's flags; the loader
// -includes it only while it is current (core/cpu_jit.h). No header of this source tree belongs
// here: the JIT may compile another tree ($OPFORGE_SOURCE_DIR), whose headers must be the ones used.
//
// The static target only (HWY_COMPILE_ONLY_STATIC), as the JIT builds: foreach_target.h must come
// first, as in the ops, or their own foreach_target.h re-toggles highway.h into a second copy.
#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <initializer_list>
#include <limits>
#include <mutex>  // 40 ms of front end in a module that needs it; ~nothing in one that does not
#include <optional>
#include <span>
#include <string_view>
#include <type_traits>
#include <vector>

#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"  // Highway's exp/log, 14-20 ms where used

// Clang keeps the template instantiations a PCH makes (-fpch-instantiate-templates), so the
// standard-library ones the op modules share are made here once instead of in every module
// (10-20 ms of a 0.3-0.45 s pair compile). GCC makes them in every module anyway (it writes its
// PCH before instantiating), and would then make them in modules that never use them.
#if defined(__clang__)
namespace opf_jit_pch {
inline void instantiate(size_t n, const char* s) {
  std::vector<float> f(n, 0.0f), g(n);
  std::vector<double> d(n, 0.0), e;
  std::vector<uint8_t> u(n, 0);
  e.assign(n, 0.0);
  g.assign(n, 0.0f);
  std::fill(f.begin(), f.end(), 0.0f);
  std::fill(d.begin(), d.end(), 0.0);
  (void)std::find(u.begin(), u.end(), uint8_t(1));
  f.resize(n + 1);
  d.resize(n + 1);
  const auto a = hwy::AllocateAligned<float>(n);
  (void)(std::string_view(s) == std::string_view("x"));
}
}  // namespace opf_jit_pch
#endif
