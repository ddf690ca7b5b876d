// `opforge op`'s host side on a synthetic op (no manifest op has list, i64, bool or enum
// arguments yet): --param typing, --in grouping into lists, dtype choice and checks, outputs.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <functional>

#include "npy.h"
#include "op/args.h"
#include "op/params.h"
#include "opforge/error.h"

namespace opf::cli {
namespace {
namespace fs = std::filesystem;

struct TempDir {
  std::string path;
  TempDir() {
    char t[] = "/tmp/opf-op-args-test-XXXXXX";
    path = mkdtemp(t);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

ArgInfo arg(const char* name, Role role, DTypeRule rule, const char* shape, bool list = false,
            DType fixed = DType::f32) {
  ArgInfo a;
  a.name = name;
  a.role = role;
  a.rule = rule;
  a.shape = shape;
  a.list = list;
  a.fixed = fixed;
  return a;
}

// A multi-tensor optimizer step, roughly: lists of params (inout) and grads, a step count, a
// list of per-tensor norms out, plus one scalar param of each type.
OpInfo fake_op() {
  OpInfo op;
  op.name = "fake";
  op.dtypes = {"f32", "bf16"};
  EntryInfo e;
  e.name = "step";
  e.args = {arg("params", Role::inout, DTypeRule::storage, "[n_i]", true),
            arg("grads", Role::in, DTypeRule::storage, "[n_i]", true),
            arg("step", Role::in, DTypeRule::fixed, "[]", false, DType::i64),
            arg("norms", Role::out, DTypeRule::acc, "[1]", true), arg("total", Role::out, DTypeRule::acc, "[]")};
  op.entries = {e};
  ParamInfo lr;
  lr.name = "lr";
  lr.def = 1e-3;
  lr.min = 0;
  lr.min_open = true;
  ParamInfo iters;
  iters.name = "iters";
  iters.type = ParamType::i64;
  iters.def = 1;
  iters.min = 1;
  ParamInfo nesterov;
  nesterov.name = "nesterov";
  nesterov.type = ParamType::boolean;
  ParamInfo mode;
  mode.name = "mode";
  mode.type = ParamType::enumeration;
  mode.choices = {"sum", "mean"};
  mode.max = 1;
  op.params = {lr, iters, nesterov, mode};
  return op;
}

std::string write(const std::string& path, DType d, std::vector<int64_t> shape, double fill) {
  npy::Array a;
  a.dtype = d;
  a.shape = std::move(shape);
  a.data.resize(size_t(a.numel()) * dtype_size(d));
  for (int64_t i = 0; i < a.numel(); ++i) store_element(d, a.data.data(), i, fill + double(i));
  npy::write(path, a);
  return path;
}

TEST(OpParams, TypedValuesAndOneLineErrors) {
  const OpInfo op = fake_op();
  const Params p = parse_params(op, {"lr=0.5", "iters=3", "nesterov=true", "mode=mean"});
  EXPECT_EQ(p.get("lr"), 0.5);
  EXPECT_EQ(p.get("iters"), 3);
  EXPECT_EQ(p.get("nesterov"), 1);
  EXPECT_EQ(p.get("mode"), 1);
  EXPECT_EQ(parse_params(op, {"nesterov=0"}).get("nesterov"), 0);
  EXPECT_EQ(parse_params(op, {}).get("lr"), 1e-3);  // defaults
  EXPECT_EQ(error_of([&] { parse_params(op, {"lr=0"}); }), "param 'lr' = 0 must be > 0");
  EXPECT_EQ(error_of([&] { parse_params(op, {"lr=fast"}); }), "param 'lr' = 'fast' is not a number");
  EXPECT_EQ(error_of([&] { parse_params(op, {"iters=2.5"}); }), "param 'iters' = 2.5 must be an integer");
  EXPECT_EQ(error_of([&] { parse_params(op, {"iters=0"}); }), "param 'iters' = 0 must be >= 1");
  EXPECT_EQ(error_of([&] { parse_params(op, {"nesterov=yes"}); }),
            "param 'nesterov' = 'yes' is not a bool (true, false, 1, 0)");
  EXPECT_EQ(error_of([&] { parse_params(op, {"mode=max"}); }),
            "param 'mode' = 'max' is not one of its choices (sum, mean)");
  EXPECT_EQ(error_of([&] { parse_params(op, {"beta=1"}); }),
            "op 'fake' has no param 'beta' (params: lr, iters, nesterov, mode)");
  EXPECT_EQ(error_of([&] { parse_params(op, {"lr=1", "lr=2"}); }), "param 'lr' is given twice");
  EXPECT_EQ(error_of([&] { parse_params(op, {"lr"}); }), "--param 'lr': expected NAME=VALUE");
}

TEST(OpArgs, ListsScalarsAndOutputs) {
  TempDir t;
  const OpInfo op = fake_op();
  const EntryInfo& e = op.entries[0];
  const std::string p0 = write(t.path + "/p0.npy", DType::f32, {3}, 1),
                    p1 = write(t.path + "/p1.npy", DType::f32, {5}, 2),
                    g0 = write(t.path + "/g0.npy", DType::f32, {3}, 3),
                    g1 = write(t.path + "/g1.npy", DType::f32, {5}, 4),
                    step = write(t.path + "/step.npy", DType::i64, {}, 7),
                    n = write(t.path + "/n.npy", DType::f64, {1}, 9);
  const HostCall c = load_call(
      op, e, {"params=" + p0, "grads=" + g0, "params=" + p1, "grads=" + g1, "step=" + step, "norms=" + n, "norms=" + n},
      std::nullopt);
  EXPECT_EQ(c.storage, DType::f32);  // from params, the first float T input
  ASSERT_EQ(c.args.size(), 5u);
  ASSERT_EQ(c.args[0].elems.size(), 2u);  // list elements in --in order
  EXPECT_EQ(c.args[0].elems[1].shape, Shape{5});
  EXPECT_EQ(load_element(DType::f32, c.args[0].elems[1].bytes.data(), 0), 2);
  EXPECT_EQ(c.args[2].dtype, DType::i64);
  EXPECT_TRUE(c.args[2].elems[0].shape.empty());
  EXPECT_EQ(load_element(DType::i64, c.args[2].elems[0].bytes.data(), 0), 7);
  // an out list given with --in: its shapes, zeroed contents in the argument's dtype (acc = f32)
  ASSERT_EQ(c.args[3].elems.size(), 2u);
  EXPECT_EQ(c.args[3].dtype, DType::f32);
  EXPECT_EQ(c.args[3].elems[0].bytes, std::vector<std::byte>(4, std::byte{0}));
  // an out tensor inferred from its manifest shape
  ASSERT_EQ(c.args[4].elems.size(), 1u);
  EXPECT_TRUE(c.args[4].elems[0].shape.empty());
  // to_npy: bf16 goes out as f32
  HostArg bf = c.args[0];
  bf.dtype = DType::bf16;
  bf.elems[0].bytes.assign(6, std::byte{0});
  store_element(DType::bf16, bf.elems[0].bytes.data(), 1, 1.5);
  const npy::Array out = to_npy(bf, bf.elems[0]);
  EXPECT_EQ(out.dtype, DType::f32);
  EXPECT_EQ(load_element(DType::f32, out.data.data(), 1), 1.5);
}

TEST(OpArgs, EmptyListsAndDtypes) {
  TempDir t;
  const OpInfo op = fake_op();
  const EntryInfo& e = op.entries[0];
  const std::string step = write(t.path + "/step.npy", DType::i64, {}, 1);
  // no --in for a list: an empty list; no float input: the op's first dtype
  HostCall c = load_call(op, e, {"step=" + step}, std::nullopt);
  EXPECT_EQ(c.storage, DType::f32);
  EXPECT_TRUE(c.args[0].elems.empty());
  EXPECT_TRUE(c.args[3].elems.empty());
  // bf16 reads f32 files, rounding to nearest even
  const std::string p = write(t.path + "/p.npy", DType::f32, {2}, 1.00390625);  // halfway between two bf16
  c = load_call(op, e, {"params=" + p, "step=" + step}, DType::bf16);
  EXPECT_EQ(c.args[0].dtype, DType::bf16);
  EXPECT_EQ(load_element(DType::bf16, c.args[0].elems[0].bytes.data(), 0), 1.0);
  EXPECT_EQ(c.args[4].dtype, DType::f32);  // acc
  const std::string f64 = write(t.path + "/p64.npy", DType::f64, {2}, 1);
  EXPECT_EQ(error_of([&] {
              load_call(op, e, {"params=" + f64, "step=" + step}, std::nullopt);
            }),
            "argument 'params': " + f64 +
                " holds f64; fake runs f32, bf16 (choose one with --dtype; bf16 takes '<f4' files)");
  const std::string stepf = write(t.path + "/stepf.npy", DType::f32, {}, 1);
  EXPECT_EQ(error_of([&] { load_call(op, e, {"step=" + stepf}, std::nullopt); }),
            "argument 'step': " + stepf + ": field 'descr' is '<f4' (f32), but the argument is i64 ('<i8')");
  EXPECT_EQ(error_of([&] { load_call(op, e, {"step=" + step}, DType::f64); }), "--dtype f64: fake runs f32, bf16");
  EXPECT_EQ(error_of([&] { load_call(op, e, {}, std::nullopt); }),
            "argument 'step' (in) is missing: give it with --in step=FILE");
  EXPECT_EQ(error_of([&] {
              load_call(op, e, {"step=" + step, "step=" + step}, std::nullopt);
            }),
            "argument 'step' is given twice (it is one tensor, not a list)");
  EXPECT_EQ(error_of([&] { load_call(op, e, {"step="}, std::nullopt); }), "argument 'step': --in step= names no file");
  EXPECT_EQ(error_of([&] { load_call(op, e, {"=x.npy"}, std::nullopt); }), "--in '=x.npy': expected NAME=VALUE");
  EXPECT_EQ(error_of([&] {
              load_call(op, e, {"step=" + step, "norms=" + step}, std::nullopt);
            }),
            "argument 'norms' element 0 has 0 dims; its manifest shape [1] has 1");
}

}  // namespace
}  // namespace opf::cli
