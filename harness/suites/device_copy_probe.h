// The GPU counterpart of bandwidth_probe.h: each GPU kernel's bw_frac is its fraction of what a
// device-to-device copy achieves on the same device in the same run. `probe/device_copy/<backend>`
// copies 4 x the device's L2 (at least 256 MiB) between two device buffers, timed with the
// device's events; bytes counted read + write (2 x the size).
#pragma once

#include <string>

namespace opf::suites {

std::string device_probe_name(const std::string& backend);

// Registers `probe/device_copy/<backend>` (manual time: the device's own timing). Register it
// before the backend's kernels: google-benchmark runs benchmarks in registration order.
void register_device_probe(const std::string& backend);

// Mean copy bandwidth (bytes/s) of the backend's device in this process; measured now (a few
// copies) when the probe benchmark was filtered out, so bw_frac always has a denominator.
double device_probe_bandwidth(const std::string& backend);

}  // namespace opf::suites
