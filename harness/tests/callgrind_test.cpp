// The callgrind step's parsing: callgrind profiles -> opforge.callgrind/2, read back by the gate.
// Inputs are written here in callgrind's documented format (valgrind's "Callgrind Format
// Specification": `events:` names the columns, `summary:`/`totals:` hold the sums, trailing zero
// columns may be left out; `ob=`/`fn=` with "(id) name" compression, a `calls=` line followed by
// the call's inclusive cost, relative positions "+n", "-n", "*"), not produced by the code under
// test.
#include <gtest/gtest.h>

#include <filesystem>
#include <unistd.h>

#include "common/files.h"
#include "matrix/callgrind.h"
#include "matrix/gate_input.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace {

std::string profile(const std::string& trigger, const std::string& events, const std::string& summary,
                    const std::string& object = "/work/opforge/build/kernels/opf_softmax_cpu.so") {
  return "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npid: 4242\ncmd:  ./opforge-kernel-instr "
         "--calls=10\n"
         "part: 3\n\n\ndesc: I1 cache: \ndesc: Timerange: Basic block 1000 - 2000\ndesc: Trigger: " +
         trigger + "\n\npositions: line\nevents: " + events + "\nsummary: " + summary + "\n\n\nob=(1) " + object +
         "\nfl=(1) k.cpp\nfn=(1) kernel\n12 " + summary + "\n\ntotals: " + summary + "\n";
}

TEST(CallgrindParse, IrFromSummary) {
  auto d = parse_callgrind_out(profile("Client Request: layer_norm/cpu/f32/forward/1x4096", "Ir", "112164"), "p");
  EXPECT_EQ(d.trigger, "Client Request: layer_norm/cpu/f32/forward/1x4096");
  EXPECT_EQ(d.instructions, 112164);
}

TEST(CallgrindParse, IrColumnAmongOtherEvents) {
  EXPECT_EQ(parse_callgrind_out(profile("x", "Dr Ir Dw", "7 900 3"), "p").instructions, 900);
  // callgrind leaves out trailing zero columns: Ir is the third column, absent -> 0
  EXPECT_EQ(parse_callgrind_out(profile("x", "Dr Dw Ir", "7 3"), "p").instructions, 0);
}

TEST(CallgrindParse, TotalsWhenNoSummary) {
  std::string text = "events: Ir\ndesc: Trigger: Program termination\nfn=(1) main\n3 55\ntotals: 55\n";
  auto d = parse_callgrind_out(text, "p");
  EXPECT_EQ(d.trigger, "Program termination");
  EXPECT_EQ(d.instructions, 55);
}

// A kernel in the build's module calling memset in libc, itself called from the driver: self costs
// by object, the calls' inclusive costs (the line after `calls=`) not counted twice.
TEST(CallgrindParse, SystemLibrariesSelfCostApart) {
  const std::string text =
      "events: Ir\nsummary: 1000\n\n"
      "ob=(9) /home/u/opforge/build/harness/suites/opforge-kernel-instr\nfl=(1) ???\nfn=(1) main\n0 40\n"
      "cob=(11) /home/u/opforge/build/kernels/opf_layer_norm_cpu.so\ncfn=(2) kernel\ncalls=10 0 \n0 900\n0 5\n\n"
      "ob=(11)\nfn=(2)\n0 300\ncob=(3) /usr/lib/x86_64-linux-gnu/libc.so.6\ncfn=(3) __memset_avx2_unaligned_erms\n"
      "calls=10 167 \n0 550\n0 50\n\n"
      "ob=(3)\nfl=(2) memset.S\nfn=(3)\n167 20\n+1 500\n* 30\n\n"
      "ob=(12) /lib64/ld-linux-x86-64.so.2\nfn=(4) _dl_runtime_resolve\n5 55\n\ntotals: 1000\n";
  auto d = parse_callgrind_out(text, "p");
  EXPECT_EQ(d.instructions, 1000);
  EXPECT_EQ(d.library_instructions, 605);  // memset 550 + ld.so 55; main 45, kernel 350 are ours
  // the self costs must add up to the summary: a body this parser misreads is an error, not a count
  try {
    std::string off = text;
    off.replace(off.find("* 30"), 4, "* 31");
    parse_callgrind_out(off, "dir/callgrind.out.4");
    FAIL() << "self costs off the summary accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(),
                 "dir/callgrind.out.4:2: the self costs add up to 1001 instructions, not the summary's 1000 (a "
                 "profile format this parser does not read)");
  }
  EXPECT_THROW(parse_callgrind_out("events: Ir\nob=(4)\n0 5\nsummary: 5\n", "p"), Error);  // (id) never named
  EXPECT_TRUE(is_system_library("/usr/lib/x86_64-linux-gnu/libhwy.so.1"));
  EXPECT_TRUE(is_system_library("/lib/x86_64-linux-gnu/libm.so.6"));
  EXPECT_FALSE(is_system_library("/home/u/opforge/build/kernels/opf_layer_norm_cpu.so"));
  EXPECT_FALSE(is_system_library("/usr/local/src/opforge/build/kernels/opf_layer_norm_cpu.so"));
}

TEST(CallgrindParse, BadProfilesNameFileAndLine) {
  try {
    parse_callgrind_out("version: 1\nsummary: 5\n", "dir/callgrind.out.3");
    FAIL() << "no events line accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "dir/callgrind.out.3:2: no `events:` line (not a callgrind profile)");
  }
  EXPECT_THROW(parse_callgrind_out("events: Ir\nfn=(1) f\n", "p"), Error);         // truncated
  EXPECT_THROW(parse_callgrind_out("events: Dr Dw\nsummary: 1 2\n", "p"), Error);  // no Ir
  try {
    parse_callgrind_out("events: Ir\nsummary: 12x\n", "q");
    FAIL() << "non-numeric count accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "q:2: Ir count '12x' is not a number (events on line 1)");
  }
}

TEST(CallgrindJson, ClientRequestDumpsPerCallSorted) {
  std::vector<CallgrindDump> dumps{{"Program termination", 0, 0},
                                   {"Client Request: rms_norm/cpu/f32/forward/1x4096", 1890, 0},
                                   {"Client Request: layer_norm/cpu/f32/forward/1x4096", 1121640, 1000},
                                   {"Client Request: layer_norm/cpu/bf16/forward/1x4096", 15, 0}};
  json::Value doc = callgrind_json(dumps, 10);
  EXPECT_EQ(doc.str("schema"), "opforge.callgrind/2");
  const auto& b = doc.get("benchmarks").as_array();
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].str("name"), "layer_norm/cpu/bf16/forward/1x4096");
  EXPECT_EQ(b[0].num("instructions"), 2);  // 1.5 per call, rounded
  EXPECT_EQ(b[1].str("name"), "layer_norm/cpu/f32/forward/1x4096");
  EXPECT_EQ(b[1].num("instructions"), 112064);  // outside the system libraries
  EXPECT_EQ(b[1].num("library_instructions"), 100);
  EXPECT_EQ(b[2].str("name"), "rms_norm/cpu/f32/forward/1x4096");
  EXPECT_EQ(b[2].num("instructions"), 189);
  EXPECT_THROW(callgrind_json({{"Client Request: a", 1, 0}, {"Client Request: a", 2, 0}}, 10), Error);
  EXPECT_THROW(callgrind_json(dumps, 0), Error);
}

TEST(CallgrindJson, DirectoryToGateInput) {
  namespace fs = std::filesystem;
  std::string dir = (fs::temp_directory_path() / ("opf-cg-test-" + std::to_string(getpid()))).string();
  fs::remove_all(dir);
  files::make_dirs(dir);
  files::write_atomic(dir + "/callgrind.out", profile("Program termination", "Ir", "0"));
  files::write_atomic(dir + "/callgrind.out.1", profile("Client Request: softmax/cpu/f32/forward/2x3", "Ir", "5000"));
  files::write_atomic(dir + "/callgrind.out.2",
                      profile("Client Request: softmax/cpu/f16/forward/2x3", "Ir Dr", "7000 10"));
  files::write_atomic(dir + "/unrelated.txt", "not a profile");
  files::write_atomic(dir + "/callgrind.json", json::dump(callgrind_json(read_callgrind_dir(dir), 10)));
  auto counts = read_callgrind_json(dir + "/callgrind.json", "prebuilt");
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts[0].cell, "prebuilt");
  EXPECT_EQ(counts[0].name, "softmax/cpu/f16/forward/2x3");
  EXPECT_EQ(counts[0].instructions, 700);
  EXPECT_EQ(counts[1].name, "softmax/cpu/f32/forward/2x3");
  EXPECT_EQ(counts[1].instructions, 500);
  fs::remove_all(dir);
}

// valgrind's own wording when its emulation lacks an instruction: a skip with the function named;
// any other valgrind failure is not explained away.
TEST(Callgrind, IllegalOpcodeUnderValgrindIsAReasonToSkip) {
  const std::string log =
      "==123== valgrind: Unrecognised instruction at address 0x4a1b2c3.\n"
      "vex amd64->IR: unhandled instruction bytes: 0x62 0xF2\n"
      "==123== Process terminating with default action of signal 4 (SIGILL)\n"
      "==123==  Illegal opcode at address 0x4A1B2C3\n"
      "==123==    at 0x4A1B2C3: hwy::platform::TimerResolution() (in /usr/lib/x86_64-linux-gnu/libhwy.so.1.0.3)\n";
  const std::string why = valgrind_cannot_run_reason(log);
  EXPECT_NE(why.find("illegal opcode"), std::string::npos) << why;
  EXPECT_NE(why.find("hwy::platform::TimerResolution()"), std::string::npos) << why;
  EXPECT_EQ(valgrind_cannot_run_reason("==1== Process terminating with default action of signal 11 (SIGSEGV)\n"), "");
}

}  // namespace
}  // namespace opf::matrix
