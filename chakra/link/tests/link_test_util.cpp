#include "link_test_util.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <fstream>
#include <sstream>

#include "byte_source.h"
#include "regress.h"

namespace opf::chakra::test {

std::string traces_dir() {
  std::string d = default_traces_dir();
  // a missing corpus fails the test that needs it, loudly: nothing here can be skipped
  EXPECT_TRUE(std::filesystem::is_directory(d)) << "trace corpus " << d << " is missing (it is part of the repository)";
  return d;
}

std::filesystem::path scratch_dir(const std::string& name) {
  auto p = std::filesystem::temp_directory_path() / ("opf_chakra_link_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p;
}

std::string read_text(const std::filesystem::path& p) { return read_all(p.string()); }

void write_text(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary);
  f << s;
}

void write_gzip(const std::filesystem::path& p, const std::string& s) {
  gzFile g = gzopen(p.c_str(), "wb");
  gzwrite(g, s.data(), unsigned(s.size()));
  gzclose(g);
}

std::string json_diff(simdjson::dom::element a, simdjson::dom::element b, const std::string& path) {
  using simdjson::dom::element_type;
  if (a.type() != b.type())
    return path + ": kind " + std::to_string(int(a.type())) + " vs " + std::to_string(int(b.type()));
  switch (a.type()) {
    case element_type::ARRAY: {
      auto x = simdjson::dom::array(a), y = simdjson::dom::array(b);
      if (x.size() != y.size())
        return path + ": length " + std::to_string(x.size()) + " vs " + std::to_string(y.size());
      size_t i = 0;
      auto yi = y.begin();
      for (auto xv : x) {
        auto d = json_diff(xv, *yi, path + "[" + std::to_string(i) + "]");
        if (!d.empty()) return d;
        ++yi;
        ++i;
      }
      return "";
    }
    case element_type::OBJECT: {
      auto x = simdjson::dom::object(a), y = simdjson::dom::object(b);
      if (x.size() != y.size())
        return path + ": " + std::to_string(x.size()) + " vs " + std::to_string(y.size()) + " keys";
      auto yi = y.begin();
      for (auto xf : x) {
        if (xf.key != yi.key()) return path + ": key '" + std::string(xf.key) + "' vs '" + std::string(yi.key()) + "'";
        auto d = json_diff(xf.value, yi.value(), path + "." + std::string(xf.key));
        if (!d.empty()) return d;
        ++yi;
      }
      return "";
    }
    case element_type::INT64:
      return int64_t(a) == int64_t(b) ? ""
                                      : path + ": " + std::to_string(int64_t(a)) + " vs " + std::to_string(int64_t(b));
    case element_type::UINT64: return uint64_t(a) == uint64_t(b) ? "" : path + ": uint differs";
    case element_type::DOUBLE: {
      std::ostringstream s;
      s.precision(17);
      s << double(a) << " vs " << double(b);
      return double(a) == double(b) ? "" : path + ": " + s.str();
    }
    case element_type::STRING:
      return std::string_view(a) == std::string_view(b)
                 ? ""
                 : path + ": '" + std::string(std::string_view(a)) + "' vs '" + std::string(std::string_view(b)) + "'";
    case element_type::BOOL: return bool(a) == bool(b) ? "" : path + ": bool differs";
    case element_type::NULL_VALUE: return "";
  }
  return "";
}

}  // namespace opf::chakra::test
