// Internal: the HIP backend's hiprtc path and device probe, exposed for tests and `opforge ops`.
// Everything here works without a GPU.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"

namespace opf::detail {

Availability hip_availability();  // cached; dlopen(libamdhip64) + hipGetDeviceCount
// Arch the JIT targets: device 0's ("gfx90a") when a device exists, else the last `arch_hip`.
std::string hip_jit_arch();
// Archs hiprtc 5.2 compiles; any other aborts the process, so hiprtc_compile refuses them.
const std::vector<std::string>& hiprtc_known_archs();
std::string hiprtc_version();  // "5.2 (HIP runtime 50221153)", or "unavailable"
std::vector<std::string> hiprtc_options(const JitSource& src, const std::string& arch);
// Compiles src to a code object for arch; writes the command and hiprtc's log to log_path.
// Throws opf::Error naming log_path on failure (including an arch hiprtc would crash on).
void hiprtc_compile(const std::string& op, const JitSource& src, const std::string& arch, const std::string& out_path,
                    const std::string& log_path);

}  // namespace opf::detail
