// `opforge matrix probe`: loads every enabled op x backend of *this* build twice through the
// loader (cold: prebuilt module or JIT compile into an empty cache; warm: after forget(), a cache
// hit) and reports the path taken and the time. The matrix runner calls the probe of each cell's
// own opforge, so "every enabled op loads" is shown by a load, not inferred from files.
#pragma once

#include "matrix/json.h"

namespace opf::matrix {

// {"schema": "opforge.probe/1", "mode", "loads": [{op, backend, status: loaded|unavailable|failed,
//   reason, cold: {source, seconds, path, key}, warm: {...}}], "stats": {...}}
json::Value run_load_probe();

}  // namespace opf::matrix
