// The planner on the project's real matrices (options from `meson introspect`, ops from the
// manifest) and on synthetic problems: the pairwise property is checked against a brute-force
// enumeration of the cartesian product, independent of the generator's own bookkeeping.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "matrix/load_plan.h"
#include "matrix/pairwise.h"
#include "matrix/plan.h"
#include "opforge/build_info.h"
#include "opforge/error.h"

namespace opf::matrix {
namespace {

std::string src() { return build::source_root(); }

// meson introspect takes seconds on a busy machine: once per test program
const OptionCatalog& catalog() {
  static const OptionCatalog c = OptionCatalog::introspect(src());
  return c;
}

// Every full assignment of the axes that no rule of the spec excludes.
std::vector<Options> valid_cartesian(const MatrixSpec& spec, const OptionCatalog& cat) {
  std::vector<Options> out;
  std::vector<size_t> idx(spec.axes.size(), 0);
  while (true) {
    Options o = spec.base;
    for (size_t a = 0; a < idx.size(); ++a) o[spec.axes[a].option] = spec.axes[a].literals[idx[a]];
    bool excluded = false;
    for (const auto& r : spec.excludes) {
      bool all = true;
      for (const auto& [k, v] : r.when) {
        std::string eff = o.count(k) ? o.at(k) : cat.find(k)->default_literal;
        all = all && eff == v;
      }
      excluded = excluded || all;
    }
    if (!excluded) out.push_back(o);
    size_t a = 0;
    while (a < idx.size() && ++idx[a] == spec.axes[a].literals.size()) idx[a++] = 0;
    if (a == idx.size()) break;
  }
  return out;
}

TEST(Plan, FullMatrixIsPairwiseAndFarSmallerThanTheProduct) {
  const auto& cat = catalog();
  auto manifest = OpManifest::read(src() + "/kernels/manifest.toml");
  auto spec = read_matrix(src() + "/matrices/full.toml", cat, manifest);
  auto plan = make_plan(spec, cat, "test-toolchain");
  ASSERT_GE(spec.axes.size(), manifest.ops.size() + 2) << "every op, backend and mode is an axis";
  auto valid = valid_cartesian(spec, cat);
  std::printf("full.toml: %zu axes, cartesian %.0f (%zu valid), planned %zu cells\n", spec.axes.size(), plan.cartesian,
              valid.size(), plan.cells.size());
  int checked = 0, infeasible = 0;
  for (size_t a = 0; a < spec.axes.size(); ++a)
    for (size_t b = a + 1; b < spec.axes.size(); ++b)
      for (const auto& va : spec.axes[a].literals)
        for (const auto& vb : spec.axes[b].literals) {
          const auto& na = spec.axes[a].option;
          const auto& nb = spec.axes[b].option;
          bool possible = false;
          for (const auto& o : valid) possible = possible || (o.at(na) == va && o.at(nb) == vb);
          bool covered = false;
          for (const auto& c : plan.cells)
            covered = covered ||
                      (c.options.count(na) && c.options.count(nb) && c.options.at(na) == va && c.options.at(nb) == vb);
          ++checked;
          if (!possible) {
            ++infeasible;
            EXPECT_FALSE(covered) << na << "=" << va << " " << nb << "=" << vb << " is excluded by a rule but planned";
          } else {
            EXPECT_TRUE(covered) << "pair " << na << "=" << va << ", " << nb << "=" << vb << " appears in no cell";
          }
        }
  EXPECT_EQ(checked, plan.pairs_total);
  EXPECT_EQ(infeasible, plan.pairs_infeasible);
  // every planned cell is a valid configuration
  for (const auto& c : plan.cells)
    for (const auto& r : spec.excludes) {
      bool all = true;
      for (const auto& [k, v] : r.when)
        all = all && (c.options.count(k) ? c.options.at(k) : cat.find(k)->default_literal) == v;
      EXPECT_FALSE(all) << c.name << " matches exclude rule: " << r.reason;
    }
  EXPECT_LE(double(plan.cells.size()) * 5, plan.cartesian) << "pairwise must be far smaller than the product";
}

TEST(Plan, IdsAreStableAndDependOnOptionsAndToolchain) {
  const auto& cat = catalog();
  auto manifest = OpManifest::read(src() + "/kernels/manifest.toml");
  auto spec = read_matrix(src() + "/matrices/default.toml", cat, manifest);
  auto p1 = make_plan(spec, cat, "gcc 12.2.0");
  auto p2 = make_plan(spec, cat, "gcc 12.2.0");
  auto p3 = make_plan(spec, cat, "gcc 13.1.0");
  ASSERT_EQ(p1.cells.size(), 2u);
  std::set<std::string> ids;
  for (size_t i = 0; i < p1.cells.size(); ++i) {
    EXPECT_EQ(p1.cells[i].id, p2.cells[i].id);
    EXPECT_NE(p1.cells[i].id, p3.cells[i].id);
    EXPECT_EQ(p1.cells[i].id.size(), 12u);
    ids.insert(p1.cells[i].id);
  }
  EXPECT_EQ(ids.size(), 2u);
  // id = hash of the sorted options: insertion order does not matter
  Options a{{"mode", "'jit'"}, {"tests", "'enabled'"}}, b;
  b["tests"] = "'enabled'";
  b["mode"] = "'jit'";
  EXPECT_EQ(cell_id(a, "t"), cell_id(b, "t"));
  // the plan survives a JSON round trip (what --emit slurm / --cell rely on)
  auto back = Plan::from_json(p1.to_json(), "memory");
  ASSERT_EQ(back.cells.size(), p1.cells.size());
  EXPECT_EQ(back.cells[1].id, p1.cells[1].id);
  EXPECT_EQ(back.cells[1].options, p1.cells[1].options);
}

TEST(Plan, NativeFileSplitsBuiltinAndProjectOptions) {
  const auto& cat = catalog();
  Cell c{"abc", "asan", "cell", {{"b_sanitize", "'address,undefined'"}, {"mode", "'jit'"}, {"arch_cuda", "['9.0']"}}};
  auto nf = native_file(c, cat);
  auto bi = nf.find("[built-in options]"), pr = nf.find("[project options]");
  ASSERT_NE(bi, std::string::npos);
  ASSERT_NE(pr, std::string::npos);
  auto san = nf.find("b_sanitize = 'address,undefined'"), mode = nf.find("mode = 'jit'"),
       arch = nf.find("arch_cuda = ['9.0']");
  EXPECT_TRUE(san > bi && san < pr);
  EXPECT_TRUE(mode > pr && arch > pr);
}

void expect_error(const std::string& toml, const std::string& fragment) {
  const auto& cat = catalog();
  auto manifest = OpManifest::read(src() + "/kernels/manifest.toml");
  try {
    parse_matrix(toml, "bad.toml", cat, manifest);
    ADD_FAILURE() << "no error for: " << toml;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find_first_of("\n\r"), std::string::npos) << "not one line: " << e.what();
  }
}

TEST(Plan, BadMatrixFilesNameFileLineAndProblem) {
  expect_error("[[cell]]\nname = \"x\"\noptions = { modee = \"jit\" }\n", "bad.toml:3:");
  expect_error("[[cell]]\nname = \"x\"\noptions = { modee = \"jit\" }\n", "'modee' is not a Meson option");
  expect_error("[[cell]]\nname = \"x\"\noptions = { mode = \"fast\" }\n",
               "'fast' is not one of its choices (prebuilt, jit, both)");
  expect_error("[[cell]]\nname = \"x\"\noptions = { b_lundef = \"no\" }\n", "boolean");
  expect_error("[[axis]]\nselect = \"@things\"\n", "unknown option group '@things'");
  expect_error("[[exclude]]\nwhen = { mode = \"jit\" }\n[[cell]]\nname = \"x\"\n", "needs 'reason'");
  expect_error("[[cell]]\nname = \"x\"\n[[cell]]\nname = \"x\"\n", "duplicate cell name 'x'");
  expect_error("[[cell]]\nname = \"x\"\nbogus = 1\n", "unknown key 'bogus'");
  expect_error("schema = 2\n", "unsupported schema");
  expect_error("[[cell]\n", "bad.toml:1:");
  expect_error("[[cell]]\nname = \"x\"\n[run]\ncallgrind = \"yes\"\n", "bad.toml:4:");
  expect_error("[[cell]]\nname = \"x\"\n[run]\ncallgrind = \"yes\"\n", "'callgrind' must be true or false");
  // toml++ quotes the bad text, newline included (found by fuzz_matrix_toml): escaped, one line
  expect_error("[run]\ncallgrind = fa\n", "bad.toml:2:");
  expect_error("[run]\ncallgrind = fa\n", "\\x0a");
  // opforge's own messages quote names from the file too: a newline in one (found by the long run)
  expect_error(
      "[[axis]]\noption = \"mode\"\n[[axis]]\noption = \"fuzz\"\n[generate]\nmethod = \"pairwise\"\n"
      "constraints = [\"enabled-op\\nx\"]\n",
      "unknown constraint 'enabled-op\\x0ax'");
}

// The callgrind switch survives plan.json (what --resume and --cell runs read back).
TEST(Plan, CallgrindSettingRoundTrips) {
  const auto& cat = catalog();
  auto manifest = OpManifest::read(src() + "/kernels/manifest.toml");
  for (bool on : {true, false}) {
    auto spec = parse_matrix(std::string("[[cell]]\nname = \"a\"\n[run]\ncallgrind = ") + (on ? "true" : "false") +
                                 "\n[run.timeouts]\ncallgrind = 42\n",
                             "m.toml", cat, manifest);
    EXPECT_EQ(spec.run.callgrind, on);
    auto back = Plan::from_json(make_plan(spec, cat, "t").to_json(), "plan.json");
    EXPECT_EQ(back.run.callgrind, on);
    EXPECT_EQ(back.run.timeouts.at("callgrind"), 42);
  }
  // plans written before the step existed have no "callgrind": off
  auto old = make_plan(parse_matrix("[[cell]]\nname = \"a\"\n", "m.toml", cat, manifest), cat, "t").to_json();
  json::Value run = old.get("run");
  json::Value trimmed = json::Object{};
  for (const auto& [k, v] : run.as_object())
    if (k != "callgrind") trimmed.set(k, v);
  old.set("run", trimmed);
  EXPECT_FALSE(Plan::from_json(old, "plan.json").run.callgrind);
}

TEST(Plan, ExcludedCellsKeepTheirReason) {
  const auto& cat = catalog();
  auto manifest = OpManifest::read(src() + "/kernels/manifest.toml");
  auto spec = parse_matrix(
      "[[cell]]\nname = \"a\"\noptions = { mode = \"jit\" }\n"
      "[[cell]]\nname = \"b\"\noptions = { mode = \"both\" }\n"
      "[[cell]]\nname = \"c\"\noptions = { mode = \"jit\" }\n"
      "[[exclude]]\nwhen = { mode = \"both\" }\nreason = \"both is covered elsewhere\"\n",
      "m.toml", cat, manifest);
  auto plan = make_plan(spec, cat, "t");
  ASSERT_EQ(plan.cells.size(), 1u);
  ASSERT_EQ(plan.excluded.size(), 2u);
  EXPECT_EQ(plan.excluded[0].reason, "both is covered elsewhere");
  EXPECT_EQ(plan.excluded[0].where, "m.toml:10");
  EXPECT_EQ(plan.excluded[1].reason, "same options as cell 'a'");
}

// Synthetic constrained problems: brute force says which pairs are possible; all must be covered.
TEST(Pairwise, RandomConstrainedProblemsAreCovered) {
  std::mt19937_64 rng(42);
  for (int trial = 0; trial < 30; ++trial) {
    PairwiseProblem p;
    int axes = 2 + int(rng() % 5);
    for (int a = 0; a < axes; ++a) p.sizes.push_back(2 + int(rng() % 3));
    int rules = int(rng() % 4);
    for (int r = 0; r < rules; ++r) {
      int a = int(rng() % axes), b = int(rng() % axes);
      std::vector<std::pair<int, int>> f{{a, int(rng() % p.sizes[a])}};
      if (b != a) f.push_back({b, int(rng() % p.sizes[b])});
      p.forbidden.push_back(f);
    }
    auto res = generate_pairwise(p);
    std::vector<std::vector<int>> all;
    std::vector<int> row(size_t(axes), 0);
    while (true) {
      if (!violates(p, row)) all.push_back(row);
      int a = 0;
      while (a < axes && ++row[a] == p.sizes[a]) row[a++] = 0;
      if (a == axes) break;
    }
    for (const auto& r : res.rows) EXPECT_FALSE(violates(p, r));
    for (int a = 0; a < axes; ++a)
      for (int b = a + 1; b < axes; ++b)
        for (int va = 0; va < p.sizes[a]; ++va)
          for (int vb = 0; vb < p.sizes[b]; ++vb) {
            bool possible = false, covered = false;
            for (const auto& r : all) possible = possible || (r[a] == va && r[b] == vb);
            for (const auto& r : res.rows) covered = covered || (r[a] == va && r[b] == vb);
            EXPECT_EQ(possible, covered) << "trial " << trial << " pair " << a << "=" << va << " " << b << "=" << vb;
          }
  }
}

// The classic bound: 13 binary axes need only a handful of rows (optimal is 6 for 2^13... we
// accept up to 10), versus 8192 for the product.
TEST(Pairwise, ManyBinaryAxesStaySmall) {
  PairwiseProblem p;
  p.sizes.assign(13, 2);
  auto res = generate_pairwise(p);
  EXPECT_LE(res.rows.size(), 10u);
  EXPECT_EQ(res.pairs_infeasible, 0);
}

}  // namespace
}  // namespace opf::matrix
