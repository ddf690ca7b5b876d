// STREAM-like bandwidth probe, measured in the same run as the kernels so every kernel reports
// its fraction of what this machine's memory actually delivers (bw_frac), not a datasheet number.
// Triad a[i] = b[i] + s * c[i] on doubles, one thread, 3 x 64 MiB arrays (>> the ~16 MB L3).
// Bytes counted the STREAM way: 3 x 8 per element (write-allocate traffic not counted).
#pragma once

namespace opf::suites {

// Registers `probe/stream_triad/1thread` (bytes_per_second counter). Register it first:
// google-benchmark runs benchmarks in registration order.
void register_bandwidth_probe();

// Best triad bandwidth (bytes/s) measured in this process. When the probe benchmark was filtered
// out, measures it now (about a quarter of a second) so bw_frac always has a denominator.
double probe_bandwidth();

}  // namespace opf::suites
