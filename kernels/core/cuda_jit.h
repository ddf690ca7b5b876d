// Internal: the CUDA backend's NVRTC path and device probe, exposed for tests and `opforge ops`.
// Everything here works without a GPU or driver.
#pragma once

#include <string>
#include <vector>

#include "core/backend.h"

namespace opf::detail {

Availability cuda_availability();  // cached; dlopen("libcuda.so.1") + cuInit + cuDeviceGetCount
// Arch the JIT targets: device 0's ("sm_90") when a device exists, else the last `arch_cuda`.
std::string cuda_jit_arch();
std::string nvrtc_version();  // "13.0", or "unavailable"
std::vector<std::string> nvrtc_options(const JitSource& src, const std::string& arch);
// Compiles src to a cubin for arch ("sm_80"); writes the command and NVRTC's log to log_path.
// Throws opf::Error naming log_path on failure.
void nvrtc_compile(const std::string& op, const JitSource& src, const std::string& arch, const std::string& out_path,
                   const std::string& log_path);

}  // namespace opf::detail
