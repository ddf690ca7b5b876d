// A real browser opens the HTML views: headless Chromium (Debian: chromium-headless-shell, or
// chromium) loads each page, and the DOM it built has one node group per node and one edge path
// per dependency (so the page parsed as intended, not just as well-formed XML); its screenshot
// differs from a blank page's. Exits 77 (skipped) when no Chromium is on PATH.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "viz_test_util.h"

namespace opf::chakra {
namespace {

using test::TempDir;

std::string g_browser;

int sh(const std::string& cmd) {
  int st = std::system(cmd.c_str());
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

std::string browser_cmd(const std::string& what, const std::string& html) {
  // --no-sandbox: tests may run as root (containers); the page is our own file
  return "timeout 120 " + g_browser + " --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,900 " + what +
         " 'file://" + html + "'";
}

void expect_browser_draws(const TempDir& td, const std::string& et, const std::string& name,
                          const VizSelection& sel = {}) {
  const std::string html = td.file(name + ".html"), dom = td.file(name + ".dom");
  const auto st = visualize(et, html, sel);
  ASSERT_EQ(sh(browser_cmd("--dump-dom", html) + " >'" + dom + "' 2>/dev/null"), 0) << name;
  const std::string text = test::read_file(dom);
  EXPECT_EQ(test::count(text, "<g class=\"n\""), st.nodes) << name << ": node groups in the browser's DOM";
  EXPECT_EQ(test::count(text, "<path class=\"d\"") + test::count(text, "<path class=\"c\""), st.edges)
      << name << ": edge paths in the browser's DOM";
  const std::string shot = td.file(name + ".png"), blank = td.file("blank.png");
  ASSERT_EQ(sh(browser_cmd("--screenshot='" + shot + "'", html) + " >/dev/null 2>&1"), 0) << name;
  test::write_file(td.file("blank.html"), "<!DOCTYPE html><html><body></body></html>\n");
  ASSERT_EQ(sh(browser_cmd("--screenshot='" + blank + "'", td.file("blank.html")) + " >/dev/null 2>&1"), 0);
  const std::string png = test::read_file(shot);
  ASSERT_GT(png.size(), 8u);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << name;
  EXPECT_NE(png, test::read_file(blank)) << name << ": the screenshot is a blank page";
}

TEST(Browser, HtmlViewsOpenWithEveryNodeAndEdge) {
  TempDir td;
  expect_browser_draws(td, test::generated(td, "all-types", 21), "all-types");
  expect_browser_draws(td, test::generated(td, "dag", 300), "dag");
  expect_browser_draws(td, test::generated(td, "chain", 400), "cut", VizSelection{std::nullopt, uint64_t(200), 5});
  test::write_et(td.file("awkward.et"), test::awkward_nodes());
  expect_browser_draws(td, td.file("awkward.et"), "awkward");
}

}  // namespace
}  // namespace opf::chakra

int main(int argc, char** argv) {
  for (const char* b : {"chromium-headless-shell", "chromium"})
    if (std::system((std::string("command -v ") + b + " >/dev/null 2>&1").c_str()) == 0) {
      opf::chakra::g_browser = b;
      break;
    }
  if (opf::chakra::g_browser.empty()) {
    std::printf(
        "SKIP: no headless Chromium on PATH (Debian: apt-get install chromium-headless-shell); the HTML views are not "
        "opened in a browser\n");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
