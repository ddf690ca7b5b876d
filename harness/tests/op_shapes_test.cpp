// Symbolic manifest shapes (harness/op/shapes.h): binding from inputs, checks, output inference.
#include <gtest/gtest.h>

#include "op/shapes.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {

ArgInfo arg(const std::string& name, const std::string& shape, Role role = Role::in, bool list = false) {
  ArgInfo a;
  a.name = name;
  a.shape = shape;
  a.role = role;
  a.list = list;
  return a;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(OpShapes, Parse) {
  const auto s = parse_shape(" [b, 1, sq,sk] ");
  ASSERT_TRUE(s);
  ASSERT_EQ(s->size(), 4u);
  EXPECT_EQ((*s)[0].kind, SymDim::symbol);
  EXPECT_EQ((*s)[1].kind, SymDim::literal);
  EXPECT_EQ((*s)[1].value, 1);
  EXPECT_EQ((*s)[3].text, "sk");
  EXPECT_EQ(parse_shape("[2*n]")->front().kind, SymDim::other);
  EXPECT_TRUE(parse_shape("[]")->empty());
  EXPECT_FALSE(parse_shape(""));
  EXPECT_FALSE(parse_shape("rows, cols"));
}

TEST(OpShapes, BindsAndInfers) {
  ShapeBinder b;
  b.bind(arg("x", "[b, np, sq, sk]"), {2, 3, 4, 5});
  b.bind(arg("mask", "[b, 1, sq, sk]"), {2, 1, 4, 5});
  EXPECT_EQ(b.infer(arg("y", "[b, np, sq, sk]", Role::out)), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(b.infer(arg("m", "[b, 1]", Role::out)), (Shape{2, 1}));
  EXPECT_EQ(b.infer(arg("s", "[]", Role::out)), Shape{});
}

TEST(OpShapes, ErrorsNameTheArgumentAndDim) {
  ShapeBinder b;
  b.bind(arg("x", "[rows, cols]"), {7, 13});
  EXPECT_EQ(error_of([&] { b.bind(arg("gamma", "[cols]"), {12}); }),
            "argument 'gamma' dim 0 (cols) is 12, but argument 'x' gave cols = 13");
  EXPECT_EQ(error_of([&] { b.bind(arg("gamma", "[cols]"), {1, 13}); }),
            "argument 'gamma' has 2 dims; its manifest shape [cols] has 1");
  EXPECT_EQ(error_of([&] { b.bind(arg("mask", "[rows, 1]"), {7, 3}); }),
            "argument 'mask' dim 1 is 3; its manifest shape [rows, 1] says 1");
  EXPECT_EQ(error_of([&] { b.infer(arg("z", "[rows, k]", Role::out)); }),
            "argument 'z' dim 1 (k) is not given by any input; give its shape with --in z=FILE");
  EXPECT_EQ(error_of([&] { b.infer(arg("z", "[2*rows]", Role::out)); }),
            "argument 'z' dim 0 (2*rows) is not a symbol or a number; give its shape with --in z=FILE");
  EXPECT_EQ(error_of([&] { b.infer(arg("z", "", Role::out)); }),
            "argument 'z' has no manifest shape to infer; give its shape with --in z=FILE");
}

TEST(OpShapes, ListElementsBindNothing) {
  ShapeBinder b;
  b.bind(arg("p", "[n_i]", Role::in, true), {5}, 0);
  b.bind(arg("p", "[n_i]", Role::in, true), {9}, 1);  // elements differ: fine
  EXPECT_EQ(error_of([&] { b.bind(arg("p", "[n_i]", Role::in, true), {9, 2}, 2); }),
            "argument 'p' element 2 has 2 dims; its manifest shape [n_i] has 1");
  EXPECT_EQ(error_of([&] { b.infer(arg("n", "[n_i]", Role::out)); }),
            "argument 'n' dim 0 (n_i) is not given by any input; give its shape with --in n=FILE");
  EXPECT_EQ(error_of([&] { b.infer(arg("q", "[n_i]", Role::out, true)); }),
            "argument 'q' is a list output: give its elements with --in q=FILE");
}

}  // namespace
}  // namespace opf::cli
