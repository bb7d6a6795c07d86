#include "experiments/common/plot.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/subprocess.h"
#include "experiments/common/report.h"

namespace mt {
namespace experiments {
namespace {

// A gnuplot string literal.
std::string Quoted(absl::string_view s) {
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\\", "\\\\"}, {"\"", "\\\""}}), "\"");
}

// 1-based index of `column` in the header line of dir/csv.
absl::StatusOr<int> ColumnIndex(const std::string& dir, const std::string& csv,
                                const std::string& column) {
  const std::string path = absl::StrCat(dir, "/", csv);
  std::ifstream in(path);
  std::string header;
  if (!in || !std::getline(in, header)) {
    return absl::NotFoundError(absl::StrCat("plot: cannot read CSV ", path));
  }
  const std::vector<std::string> names = absl::StrSplit(header, ',');
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == column) return static_cast<int>(i) + 1;
  }
  return absl::NotFoundError(
      absl::StrCat("plot: CSV ", path, " has no column '", column, "' (header: ", header, ")"));
}

absl::StatusOr<std::string> SeriesClause(const PlotSeries& s, const std::string& dir) {
  auto x = ColumnIndex(dir, s.csv, s.x);
  if (!x.ok()) return x.status();
  int where = 0;
  if (!s.where_column.empty()) {
    auto w = ColumnIndex(dir, s.csv, s.where_column);
    if (!w.ok()) return w.status();
    where = *w;
  }
  // Column `column`, or NaN on the rows the filter drops.
  const auto expr = [&](int column) {
    if (where == 0) return absl::StrCat(column);
    return absl::StrCat("(strcol(", where, ") eq ", Quoted(s.where_value), " ? $", column,
                        " : NaN)");
  };
  if (!s.y_low.empty() && !s.y_high.empty()) {
    auto low = ColumnIndex(dir, s.csv, s.y_low);
    if (!low.ok()) return low.status();
    auto high = ColumnIndex(dir, s.csv, s.y_high);
    if (!high.ok()) return high.status();
    return absl::StrFormat(
        "%s every ::1 using %d:%s:%s with filledcurves fill transparent solid 0.2 noborder "
        "title %s",
        Quoted(s.csv), *x, expr(*low), expr(*high), Quoted(s.title));
  }
  auto y = ColumnIndex(dir, s.csv, s.y);
  if (!y.ok()) return y.status();
  return absl::StrFormat("%s every ::1 using %d:%s with %s title %s", Quoted(s.csv), *x, expr(*y),
                         s.style, Quoted(s.title));
}

}  // namespace

absl::StatusOr<std::string> PlotScript(const Plot& plot, const std::string& dir,
                                       const std::string& png_name) {
  if (plot.series.empty()) return absl::InvalidArgumentError("plot: no series");
  if (plot.xlabel.empty() || plot.ylabel.empty()) {
    return absl::InvalidArgumentError("plot: axes need labels (with units)");
  }
  std::string s = absl::StrFormat(
      "# Written by experiments/common/plot.cc; run in this directory: gnuplot %s.gp\n"
      "set terminal pngcairo size %d,%d enhanced font \"sans,11\"\n"
      "set output %s\n"
      "set datafile separator \",\"\n"
      "set title %s\nset xlabel %s\nset ylabel %s\n"
      "set grid\nset key %s\n",
      png_name, plot.width, plot.height, Quoted(png_name), Quoted(plot.title), Quoted(plot.xlabel),
      Quoted(plot.ylabel),
      plot.key_below ? "below vertical maxrows 4 box\nset bmargin 8" : "outside right top box");
  if (plot.logx) absl::StrAppend(&s, "set logscale x 2\n");
  if (plot.logy) absl::StrAppend(&s, "set logscale y\n");
  if (plot.ymin || plot.ymax) {
    absl::StrAppendFormat(&s, "set yrange [%s:%s]\n", plot.ymin ? absl::StrCat(*plot.ymin) : "",
                          plot.ymax ? absl::StrCat(*plot.ymax) : "");
  }
  std::vector<std::string> clauses;
  for (const PlotSeries& series : plot.series) {
    auto c = SeriesClause(series, dir);
    if (!c.ok()) return c.status();
    clauses.push_back(*c);
  }
  absl::StrAppend(&s, "plot ", absl::StrJoin(clauses, ", \\\n     "), "\n");
  return s;
}

absl::Status DrawPlot(const Plot& plot, const std::string& png_path) {
  const size_t slash = png_path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : png_path.substr(0, slash);
  const std::string name = slash == std::string::npos ? png_path : png_path.substr(slash + 1);
  if (FindOnPath("gnuplot").empty()) {
    return absl::FailedPreconditionError(
        "gnuplot not found on PATH: install Debian's gnuplot-nox (tools/setup.sh does)");
  }
  auto script = PlotScript(plot, dir, name);
  if (!script.ok()) return script.status();
  const std::string script_name = absl::StrCat(name, ".gp");
  if (auto s = WriteFile(absl::StrCat(dir, "/", script_name), *script); !s.ok()) return s;
  std::remove(png_path.c_str());
  auto out = RunCommand({"gnuplot", script_name}, dir);
  if (!out.ok())
    return absl::InternalError(absl::StrCat("plot ", png_path, ": ", out.status().message()));
  if (access(png_path.c_str(), R_OK) != 0) {
    return absl::InternalError(absl::StrCat("gnuplot wrote no ", png_path));
  }
  return absl::OkStatus();
}

}  // namespace experiments
}  // namespace mt
