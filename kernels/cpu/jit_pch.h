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
