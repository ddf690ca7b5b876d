// Symbolic manifest shapes (kernels/core/manifest_shapes.h): binding from inputs, checks, output inference.
#include <gtest/gtest.h>

#include "core/manifest_shapes.h"
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
  EXPECT_EQ(error_of([&] {
              b.bind(arg("gamma", "[cols]"), {1, 13});
            }),
            "argument 'gamma' has 2 dims; its manifest shape [cols] has 1");
  EXPECT_EQ(error_of([&] {
              b.bind(arg("mask", "[rows, 1]"), {7, 3});
            }),
            "argument 'mask' dim 1 is 3; its manifest shape [rows, 1] says 1");
  EXPECT_EQ(error_of([&] { b.infer(arg("z", "[rows, k]", Role::out)); }),
            "argument 'z' dim 1 (k) is not given by any input; give its shape with --in z=FILE");
  EXPECT_EQ(error_of([&] { b.infer(arg("z", "[2*rows]", Role::out)); }),
            "argument 'z' dim 0 (2*rows) is not a symbol or a number; give its shape with --in z=FILE");
  EXPECT_EQ(error_of([&] { b.infer(arg("z", "", Role::out)); }),
            "argument 'z' has no manifest shape to infer; give its shape with --in z=FILE");
}

// "[B, T, U, H] | [rows, H]": a packed layout beside the dense one. An argument binds against the
// alternative of its rank; infer takes the first; a rank no alternative has is an error.
TEST(OpShapes, AlternativeLayouts) {
  ShapeBinder b;
  b.bind(arg("f", "[B, T, H]"), {2, 3, 8});
  b.bind(arg("g", "[B, U, H]"), {2, 5, 8});
  EXPECT_EQ(b.infer(arg("h", "[B, T, U, H] | [rows, H]", Role::out)), (Shape{2, 3, 5, 8}));
  b.bind(arg("h", "[B, T, U, H] | [rows, H]", Role::out), {17, 8});
  EXPECT_EQ(error_of([&] {
              b.bind(arg("d", "[B, T, U, H] | [rows, H]"), {17, 9});
            }),
            "argument 'd' dim 1 (H) is 9, but argument 'f' gave H = 8");
  EXPECT_EQ(error_of([&] { b.bind(arg("d", "[B, T, U, H] | [rows, H]"), {17}); }),
            "argument 'd' has 1 dims; its manifest shape [B, T, U, H] | [rows, H] has 4");
}

// "2H": a multiple of a symbol (x [N, 2H] of a gated op such as bias_swiglu) binds H = dim / 2,
// checks against H bound elsewhere, and infers 2 x H.
TEST(OpShapes, MultiplesOfASymbol) {
  const auto s = parse_shape("[N, 2H, 12k_0]");
  ASSERT_TRUE(s);
  EXPECT_EQ((*s)[1].kind, SymDim::symbol);
  EXPECT_EQ((*s)[1].name, "H");
  EXPECT_EQ((*s)[1].factor, 2);
  EXPECT_EQ((*s)[2].name, "k_0");
  EXPECT_EQ((*s)[2].factor, 12);
  EXPECT_EQ(parse_shape("[0H]")->front().kind, SymDim::other);
  EXPECT_EQ(parse_shape("[H2]")->front().factor, 1);
  ShapeBinder b;
  b.bind(arg("x", "[N, 2H]"), {5, 12});
  b.bind(arg("bias", "[2H]"), {12});
  EXPECT_EQ(b.infer(arg("y", "[N, H]", Role::out)), (Shape{5, 6}));
  EXPECT_EQ(b.infer(arg("dx", "[N, 2H]", Role::out)), (Shape{5, 12}));
  EXPECT_EQ(error_of([&] { b.bind(arg("bias", "[2H]"), {10}); }),
            "argument 'bias' dim 0 (2H) is 10, but argument 'x' gave H = 6");
  EXPECT_EQ(error_of([&] {
              ShapeBinder().bind(arg("x", "[N, 2H]"), {5, 11});
            }),
            "argument 'x' dim 1 (2H) is 11, not a multiple of 2");
  ShapeBinder g;  // H bound first by a plain dim
  g.bind(arg("dy", "[N, H]"), {3, 7});
  EXPECT_EQ(error_of([&] {
              g.bind(arg("x", "[N, 2H]"), {3, 7});
            }),
            "argument 'x' dim 1 (2H) is 7, not a multiple of 2");
  EXPECT_EQ(error_of([&] {
              g.bind(arg("x", "[N, 2H]"), {3, 16});
            }),
            "argument 'x' dim 1 (2H) is 16, but argument 'dy' gave H = 7");
}

TEST(OpShapes, ListElementsBindNothing) {
  ShapeBinder b;
  b.bind(arg("p", "[n_i]", Role::in, true), {5}, 0);
  b.bind(arg("p", "[n_i]", Role::in, true), {9}, 1);  // elements differ: fine
  EXPECT_EQ(error_of([&] {
              b.bind(arg("p", "[n_i]", Role::in, true), {9, 2}, 2);
            }),
            "argument 'p' element 2 has 2 dims; its manifest shape [n_i] has 1");
  EXPECT_EQ(error_of([&] { b.infer(arg("n", "[n_i]", Role::out)); }),
            "argument 'n' dim 0 (n_i) is not given by any input; give its shape with --in n=FILE");
  EXPECT_EQ(error_of([&] { b.infer(arg("q", "[n_i]", Role::out, true)); }),
            "argument 'q' is a list output: give its elements with --in q=FILE");
}

}  // namespace
}  // namespace opf::cli
