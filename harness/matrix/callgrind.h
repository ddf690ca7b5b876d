// The matrix runner's callgrind step: callgrind's profile files (one dump per kernel case, made by
// opforge-kernel-instr's client requests) turned into opforge.callgrind/2 (results/README.md).
#pragma once

#include <string>
#include <vector>

#include "matrix/json.h"

namespace opf::matrix {

struct CallgrindDump {
  std::string trigger;              // "Client Request: <case>", "Program termination", ...
  double instructions = 0;          // the Ir column of `summary:` (or `totals:`): everything
  double library_instructions = 0;  // of those, the self cost in system libraries
};

// Whether a profiled object is a system library (under /lib*, /usr/lib*: libc, libm, ld.so,
// libstdc++, libhwy, ...). Their share is kept apart because glibc picks memset, memcpy, exp, ...
// per CPU (ifuncs, tunables such as the rep-stosb threshold, and valgrind counts each rep
// iteration): the same kernel's total differs between an Intel and an AMD runner.
bool is_system_library(const std::string& object);

// Reads one callgrind.out file: the summary, and the self costs summed by object (which must add
// up to the summary). Throws opf::Error "<origin>:<line>: ..." when the file has no `events:`
// line with Ir, no summary/totals line, a count that is not a number, an object id used before it
// is named, or self costs that do not add up to the summary.
CallgrindDump parse_callgrind_out(const std::string& text, const std::string& origin);

// opforge.callgrind/2 from the dumps made by client request (others are ignored), per kernel call
// (`calls` calls were counted per case), sorted by name: `instructions` outside the system
// libraries (the gated count) and `library_instructions` inside them. Throws opf::Error when a
// case appears twice.
json::Value callgrind_json(const std::vector<CallgrindDump>& dumps, int calls);

// valgrind stops with "Illegal opcode" where its CPU emulation lacks an instruction this
// machine's libraries use (e.g. libhwy's timer init under valgrind 3.19 on AMD Zen 5 hosts): no
// count can be taken on this machine, which is not a kernel failure. The skip reason from
// valgrind's log then, else "".
std::string valgrind_cannot_run_reason(const std::string& log);

// Instructions per kernel call are taken over this many calls per case (kernel_instr.cpp --calls).
constexpr int kCallgrindCalls = 10;

// Every callgrind.out* file in `dir`, parsed.
std::vector<CallgrindDump> read_callgrind_dir(const std::string& dir);

}  // namespace opf::matrix
