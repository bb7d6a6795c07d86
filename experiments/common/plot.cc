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
  auto y = ColumnIndex(dir, s.csv, s.y);
  if (!y.ok()) return y.status();
  std::string y_expr = absl::StrCat(*y);
  if (!s.where_column.empty()) {
    auto w = ColumnIndex(dir, s.csv, s.where_column);
    if (!w.ok()) return w.status();
    y_expr = absl::StrCat("(strcol(", *w, ") eq ", Quoted(s.where_value), " ? $", *y, " : NaN)");
  }
  return absl::StrFormat("%s every ::1 using %d:%s with %s title %s", Quoted(s.csv), *x, y_expr,
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
      "set grid\nset key outside right top box\n",
      png_name, plot.width, plot.height, Quoted(png_name), Quoted(plot.title), Quoted(plot.xlabel),
      Quoted(plot.ylabel));
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

std::string FindOnPath(absl::string_view program) {
  if (program.find('/') != absl::string_view::npos) {
    const std::string p(program);
    return access(p.c_str(), X_OK) == 0 ? p : "";
  }
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(dir, "/", program);
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::string& cwd) {
  if (argv.empty()) return absl::InvalidArgumentError("RunCommand: empty argv");
  const std::string program = FindOnPath(argv[0]);
  if (program.empty()) return absl::NotFoundError(absl::StrCat(argv[0], " not found on PATH"));
  int out[2];
  if (pipe(out) != 0) return absl::InternalError("RunCommand: pipe failed");
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("RunCommand: fork failed");
  if (pid == 0) {
    dup2(out[1], STDOUT_FILENO);
    close(out[0]);
    close(out[1]);
    if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(126);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(program.c_str(), args.data());
    _exit(127);
  }
  close(out[1]);
  std::string output;
  char buf[4096];
  ssize_t n;
  while ((n = read(out[0], buf, sizeof(buf))) > 0) output.append(buf, static_cast<size_t>(n));
  close(out[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(absl::StrCat(
        argv[0], WIFEXITED(status) ? absl::StrCat(" exited with status ", WEXITSTATUS(status))
                                   : absl::StrCat(" was killed by signal ", WTERMSIG(status))));
  }
  return output;
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
