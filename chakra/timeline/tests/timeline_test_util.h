// Helpers for the timeline tests: running the opforge binary, reading a Chrome trace back.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "../../tests/test_util.h"

namespace opf::chakra::test {

struct CliRun {
  int rc;
  std::string err;
};

// stderr of `opforge ARGS` (stdout dropped) and its exit status
inline CliRun run_cli(const std::string& args) {
  std::string cmd = std::string(std::getenv("OPFORGE_EXE")) + " " + args + " 2>&1 >/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : 128, out};
}

#define OPF_REQUIRE_CLI()                                                                    \
  do {                                                                                       \
    if (!std::getenv("OPFORGE_EXE")) GTEST_SKIP() << "OPFORGE_EXE (opforge binary) not set"; \
  } while (0)

struct XEvent {
  int64_t pid, tid;
  double ts, dur;
  std::string name;
  int64_t id = -1;  // args.id or args.node_id when present
};

// The `X` events of a Chrome trace; fails the test if the text is not JSON.
inline std::vector<XEvent> x_events(const std::string& json, size_t* metadata_events = nullptr) {
  simdjson::dom::parser p;
  simdjson::padded_string ps(json);
  simdjson::dom::element doc;
  std::vector<XEvent> out;
  if (auto e = p.parse(ps).get(doc)) {
    ADD_FAILURE() << "not JSON: " << simdjson::error_message(e);
    return out;
  }
  size_t meta = 0;
  for (simdjson::dom::element ev : doc["traceEvents"].get_array()) {
    std::string_view ph = ev["ph"].get_string().value();
    if (ph == "M") {
      ++meta;
      continue;
    }
    EXPECT_EQ(ph, "X");
    XEvent x;
    x.pid = ev["pid"].get_int64().value();
    x.tid = ev["tid"].get_int64().value();
    x.ts = ev["ts"].get_double().value();
    x.dur = ev["dur"].get_double().value();
    x.name = std::string(ev["name"].get_string().value());
    int64_t id;
    if (!ev["args"]["id"].get_int64().get(id) || !ev["args"]["node_id"].get_int64().get(id)) x.id = id;
    out.push_back(std::move(x));
  }
  if (metadata_events) *metadata_events = meta;
  return out;
}

}  // namespace opf::chakra::test
