// Helpers shared by the linker tests: where the trace corpus is, scratch directories, and a
// semantic JSON comparison (same keys in the same order, same values of the same kind,
// doubles compared exactly) that names the first difference.
#pragma once

#include <simdjson.h>

#include <filesystem>
#include <string>

namespace opf::chakra::test {

// The trace corpus in the repository (chakra/tests/data/traces); a test fails when it is missing.
std::string traces_dir();

// A fresh empty directory under the build's temp space, removed by the caller if wanted.
std::filesystem::path scratch_dir(const std::string& name);

std::string read_text(const std::filesystem::path& p);  // decompresses .gz
void write_text(const std::filesystem::path& p, const std::string& s);
void write_gzip(const std::filesystem::path& p, const std::string& s);

// "" when equal, else a path + description of the first difference.
std::string json_diff(simdjson::dom::element a, simdjson::dom::element b, const std::string& path = "$");

}  // namespace opf::chakra::test
