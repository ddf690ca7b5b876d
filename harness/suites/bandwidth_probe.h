// STREAM-like bandwidth probe, measured in the same run as the kernels so every kernel reports
// its fraction of what this machine's memory actually delivers (bw_frac), not a datasheet number.
// Triad a[i] = b[i] + s * c[i] on doubles, 3 x 64 MiB arrays (>> the ~16 MB L3), at a given
// thread count (the kernels' thread pool, the array split in equal slices).
// Bytes counted the STREAM way: 3 x 8 per element (write-allocate traffic not counted).
#pragma once

#include <cstdint>
#include <string>

namespace opf::suites {

// Registers `probe/stream_triad/threads:<n>` (bytes_per_second counter). Register it before the
// kernels that use it: google-benchmark runs benchmarks in registration order.
void register_bandwidth_probe(int threads);
std::string probe_name(int threads);

// Mean triad bandwidth (bytes/s) at `threads` measured in this process. When the probe benchmark
// was filtered out, measures it now (about a quarter of a second) so bw_frac always has a
// denominator.
double probe_bandwidth(int threads);

// --ab-serve (ab_serve.h): the triad staged once per thread count, then timed in blocks of at
// least `seconds`; mean ns per pass.
void prepare_probe(int threads);
void restage_probe(int threads);  // new arrays
double time_probe(int threads, double seconds, int64_t& calls);

}  // namespace opf::suites
