// Many input files at once (convert, validate, from-text with -j): `jobs` workers take the next
// file index until none is left. Each file is processed whole by one worker, so peak memory
// grows with the largest `jobs` files in flight, not with their sum.
#pragma once

#include <cstddef>
#include <functional>

namespace opf::chakra {

// jobs <= 0: one per core. Returns the number of workers used (<= n, >= 1).
unsigned resolve_jobs(int jobs, size_t n);

// Runs f(0) ... f(n-1) on resolve_jobs(jobs, n) threads (the calling thread is one). f must not
// throw: record errors per index and report them in input order afterwards.
void for_each_file(size_t n, int jobs, const std::function<void(size_t)>& f);

// Node-parser threads a converter should use when `workers` files are converted at once: the
// cores left per file (the reader's own default when one file runs alone).
unsigned parser_threads_per_file(unsigned workers);

}  // namespace opf::chakra
