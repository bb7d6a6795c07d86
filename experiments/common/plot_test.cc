#include "experiments/common/plot.h"

#include <cstdlib>
#include <fstream>

#include "core/subprocess.h"
#include "experiments/common/report.h"
#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

std::string Dir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

Plot TwoSeries() {
  Table t({"gpus", "mode", "pct"});
  t.AddRow({"1", "mp", "100"});
  t.AddRow({"8", "mp", "77"});
  t.AddRow({"64", "mp_dp", "96"});
  t.AddRow({"512", "mp_dp", "74"});
  EXPECT_TRUE(WriteCsv(Dir() + "/e.csv", t).ok());
  Plot p;
  p.title = "Weak scaling";
  p.xlabel = "GPUs";
  p.ylabel = "efficiency (%)";
  p.logx = true;
  p.ymin = 0;
  p.series.push_back({"model parallel", "e.csv", "gpus", "pct", "mode", "mp"});
  p.series.push_back({"all", "e.csv", "gpus", "pct", "", "", "points"});
  return p;
}

TEST(PlotTest, ScriptResolvesColumnsAndFilters) {
  auto s = PlotScript(TwoSeries(), Dir(), "e.png");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->find("set output \"e.png\""), std::string::npos);
  EXPECT_NE(s->find("set xlabel \"GPUs\""), std::string::npos);
  EXPECT_NE(s->find("set ylabel \"efficiency (%)\""), std::string::npos);
  EXPECT_NE(s->find("set logscale x 2"), std::string::npos);
  EXPECT_NE(s->find("set yrange [0:]"), std::string::npos);
  EXPECT_NE(s->find("\"e.csv\" every ::1 using 1:(strcol(2) eq \"mp\" ? $3 : NaN) with "
                    "linespoints title \"model parallel\""),
            std::string::npos)
      << *s;
  EXPECT_NE(s->find("\"e.csv\" every ::1 using 1:3 with points title \"all\""), std::string::npos)
      << *s;
  EXPECT_NE(s->find("set key outside right top box\n"), std::string::npos) << *s;
  Plot below = TwoSeries();
  below.key_below = true;  // Long series names: the legend under the plot, with room for it.
  auto b = PlotScript(below, Dir(), "e.png");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(b->find("set key below vertical maxrows 4 box\nset bmargin 8\n"), std::string::npos)
      << *b;
}

TEST(PlotTest, BandFillsBetweenTwoColumns) {
  Table t({"x", "group", "low", "high"});
  t.AddRow({"1", "a", "2", "4"});
  t.AddRow({"2", "a", "3", "5"});
  ASSERT_TRUE(WriteCsv(Dir() + "/band.csv", t).ok());
  Plot p;
  p.xlabel = "x (steps)";
  p.ylabel = "y (nats)";
  PlotSeries band{"a, ±1 sd", "band.csv", "x", "", "group", "a"};
  band.y_low = "low";
  band.y_high = "high";
  p.series.push_back(band);
  auto s = PlotScript(p, Dir(), "band.png");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_NE(s->find("\"band.csv\" every ::1 using 1:(strcol(2) eq \"a\" ? $3 : NaN):(strcol(2) "
                    "eq \"a\" ? $4 : NaN) with filledcurves fill transparent solid 0.2 noborder"),
            std::string::npos)
      << *s;
  ASSERT_TRUE(DrawPlot(p, Dir() + "/band.png").ok());
}

TEST(PlotTest, ScriptErrors) {
  Plot p = TwoSeries();
  p.series[0].y = "nope";
  auto s = PlotScript(p, Dir(), "e.png");
  ASSERT_EQ(s.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.status().message().find("no column 'nope'"), absl::string_view::npos);
  p = TwoSeries();
  p.xlabel.clear();
  EXPECT_EQ(PlotScript(p, Dir(), "e.png").status().code(), absl::StatusCode::kInvalidArgument);
}

// gnuplot is installed by tools/setup.sh: its absence fails this test.
TEST(PlotTest, DrawsAPng) {
  ASSERT_FALSE(FindOnPath("gnuplot").empty()) << "gnuplot missing: run tools/setup.sh";
  ASSERT_TRUE(DrawPlot(TwoSeries(), Dir() + "/e.png").ok());
  std::ifstream in(Dir() + "/e.png", std::ios::binary);
  char magic[8] = {};
  in.read(magic, 8);
  EXPECT_EQ(std::string(magic, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  std::ifstream gp(Dir() + "/e.png.gp");
  EXPECT_TRUE(gp.good());
}

TEST(PlotTest, MissingGnuplotIsOneClearLine) {
  const std::string old = std::getenv("PATH");
  setenv("PATH", Dir().c_str(), 1);
  const absl::Status s = DrawPlot(TwoSeries(), Dir() + "/f.png");
  setenv("PATH", old.c_str(), 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("gnuplot-nox"), absl::string_view::npos);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
