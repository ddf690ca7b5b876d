// Common I/O: Python repr printer, gzip-transparent reading, atomic output, .et streams.
#include <gtest/gtest.h>
#include <zlib.h>

#include "atomic_output.h"
#include "byte_source.h"
#include "et_stream.h"
#include "input_error.h"
#include "proto/et_def.pb.h"
#include "py_repr.h"
#include "test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

std::string repr_double(double d) {
  std::string s;
  py_repr_double(d, s);
  return s;
}
std::string repr_str(std::string_view v) {
  std::string s;
  py_repr_string(v, s);
  return s;
}
std::string repr_json(const std::string& json, bool top = true) {
  simdjson::padded_string ps(json);
  simdjson::ondemand::parser p;
  auto doc = p.iterate(ps);
  // wrap: a document is not a value; go through a one-element array
  std::string wrapped = "[" + json + "]";
  simdjson::padded_string pw(wrapped);
  simdjson::ondemand::parser p2;
  auto d2 = p2.iterate(pw);
  std::string out;
  for (auto v : d2.get_array()) EXPECT_EQ(py_repr_json(v.value(), out, top), simdjson::SUCCESS);
  (void)doc;
  return out;
}

// Expected values are CPython 3 repr() results.
TEST(PyRepr, FloatsFollowPythonRepr) {
  EXPECT_EQ(repr_double(0.1), "0.1");
  EXPECT_EQ(repr_double(1e-05), "1e-05");
  EXPECT_EQ(repr_double(0.0001), "0.0001");
  EXPECT_EQ(repr_double(1e16), "1e+16");
  EXPECT_EQ(repr_double(1e15), "1000000000000000.0");
  EXPECT_EQ(repr_double(1.0), "1.0");
  EXPECT_EQ(repr_double(-2.5e-07), "-2.5e-07");
  EXPECT_EQ(repr_double(123.456), "123.456");
  EXPECT_EQ(repr_double(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(repr_double(5e-324), "5e-324");
  EXPECT_EQ(repr_double(-0.0), "-0.0");
  EXPECT_EQ(repr_double(12345678.9), "12345678.9");
}

TEST(PyRepr, StringsChooseQuotesAndEscapeLikePython) {
  EXPECT_EQ(repr_str("cpu"), "'cpu'");
  EXPECT_EQ(repr_str("it's"), "\"it's\"");
  EXPECT_EQ(repr_str("a\"b"), "'a\"b'");
  EXPECT_EQ(repr_str("it's \"x\""), "'it\\'s \"x\"'");
  EXPECT_EQ(repr_str("a\tb\nc\\"), "'a\\tb\\nc\\\\'");
  EXPECT_EQ(repr_str("\x01\x7f"), "'\\x01\\x7f'");
  EXPECT_EQ(repr_str("caf\xc3\xa9"), "'caf\xc3\xa9'");  // printable non-ASCII kept
  EXPECT_EQ(repr_str("\xc2\xa0"), "'\\xa0'");           // NBSP is not printable
  EXPECT_EQ(repr_str("\xe2\x80\xa8"), "'\\u2028'");     // line separator
}

TEST(PyRepr, JsonValuesRenderAsPythonStr) {
  EXPECT_EQ(repr_json(R"J([[5,6,0,1,4,"cpu"]])J"), "[[5, 6, 0, 1, 4, 'cpu']]");
  EXPECT_EQ(repr_json(R"J("values")J"), "values");  // top-level str() is unquoted
  EXPECT_EQ(repr_json(R"J("values")J", false), "'values'");
  EXPECT_EQ(repr_json(R"J({"a": [true, null, false]})J"), "{'a': [True, None, False]}");
  EXPECT_EQ(repr_json("123456789012345678901234567890"), "123456789012345678901234567890");
  EXPECT_EQ(repr_json("-98765432109876543210987"), "-98765432109876543210987");
  EXPECT_EQ(repr_json("-0"), "0");
  EXPECT_EQ(repr_json("1E5"), "100000.0");
  EXPECT_EQ(repr_json("1.5e300"), "1.5e+300");
  EXPECT_EQ(repr_json(R"J([[1], 6, 0, "cpu", false, "<None>"])J"), "[[1], 6, 0, 'cpu', False, '<None>']");
}

TEST(ByteSource, ReadsGzipTransparentlyIncludingConcatenatedMembers) {
  TempDir td;
  std::string plain = "{\"schema\": \"x\"}\n";
  test::write_file(td.file("a.json"), plain);
  gzFile g = gzopen(td.file("a.json.gz").c_str(), "wb");
  gzwrite(g, plain.data(), unsigned(plain.size()));
  gzclose(g);
  std::string two = test::read_file(td.file("a.json.gz"));
  test::write_file(td.file("two.gz"), two + two);  // `cat a.gz a.gz`
  EXPECT_EQ(read_all(td.file("a.json")), plain);
  EXPECT_EQ(read_all(td.file("a.json.gz")), plain);
  EXPECT_EQ(read_all(td.file("two.gz")), plain + plain);
}

TEST(AtomicOutput, NothingAppearsWithoutCommitAndOldFileSurvives) {
  TempDir td;
  std::string p = td.file("out.et");
  test::write_file(p, "old");
  {
    AtomicOutput o(p);
    o.write("new data");
  }  // no commit: discarded
  EXPECT_EQ(test::read_file(p), "old");
  EXPECT_EQ(std::system(("test $(ls '" + td.path() + "' | wc -l) -eq 1").c_str()), 0) << "temp file left behind";
  {
    AtomicOutput o(p);
    o.write("new data");
    o.commit();
  }
  EXPECT_EQ(test::read_file(p), "new data");
  {
    AtomicOutput o(td.file("z.gz"));
    o.write("compressed");
    o.commit();
  }
  EXPECT_EQ(read_all(td.file("z.gz")), "compressed");
  EXPECT_NE(test::read_file(td.file("z.gz")), "compressed");
}

TEST(EtStream, RoundTripsAndTreatsSizeZeroAsEofOnlyInCompatMode) {
  TempDir td;
  std::string p = td.file("t.et");
  {
    AtomicOutput o(p);
    EtWriter w(o);
    ChakraProtoMsg::GlobalMetadata gm;
    gm.set_version("1.0.0");
    w.write(gm);
    ChakraProtoMsg::Node n;  // id 0, nothing else: serializes to 0 bytes
    w.write(n);
    n.set_id(5);
    n.set_name("after");
    w.write(n);
    o.commit();
  }
  for (bool compat : {false, true}) {
    EtReader r(p, compat);
    ChakraProtoMsg::GlobalMetadata gm;
    ASSERT_TRUE(r.next(gm));
    EXPECT_EQ(gm.version(), "1.0.0");
    ChakraProtoMsg::Node n;
    size_t count = 0;
    while (r.next(n)) ++count;
    EXPECT_EQ(count, compat ? 0u : 2u) << "compat=" << compat;
  }
}

}  // namespace
}  // namespace opf::chakra
