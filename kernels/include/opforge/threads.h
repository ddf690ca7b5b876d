// The CPU thread pool every op shares (abi.h's opf_host). Ops split work into tasks whose
// boundaries depend only on the problem, so any thread count gives bitwise the same result.
#pragma once

#include <vector>

#include "opforge/abi.h"

namespace opf {

// $OPFORGE_NUM_THREADS when set (>= 1), else the cores this process may run on.
// Throws opf::Error naming the variable when it is not a positive integer.
int default_num_threads();
// The pool's interface at n threads (n <= 0: default_num_threads()). Lives for the process.
const opf_host* host_threads(int n = 0);
// Pins the pool's workers, for timing that must not depend on where the scheduler put them
// (benchmarks; like OpenMP's OMP_PROC_BIND, off unless called): worker i runs only on
// cpus[i % cpus.size()], from its next task on; an empty list leaves them free again. Placing the
// calling thread is the caller's business (a worker inherits its creator's mask otherwise).
void pin_workers(std::vector<int> cpus);

}  // namespace opf
