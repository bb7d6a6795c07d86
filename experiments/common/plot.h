// PNG plots drawn by gnuplot (Debian gnuplot-nox, installed by tools/setup.sh) from an
// experiment's CSV files: the script is written beside the PNG (<png>.gp, rerunnable from the
// results directory: `gnuplot efficiency.png.gp`) and run as a subprocess.
//
//   Plot p;
//   p.title = "Weak scaling"; p.xlabel = "GPUs"; p.ylabel = "efficiency (%)"; p.logx = true;
//   p.series.push_back({"paper, model parallel", "efficiency.csv", "gpus", "paper_pct",
//                       "mode", "mp"});
//   RETURN_IF_ERROR(DrawPlot(p, run.Path("efficiency.png")));
#ifndef MT_EXPERIMENTS_COMMON_PLOT_H_
#define MT_EXPERIMENTS_COMMON_PLOT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace experiments {

// One line of a plot: columns `x` and `y` (header names) of a CSV file in the same directory as
// the PNG, keeping only the rows whose column `where_column` equals `where_value` (when set).
struct PlotSeries {
  std::string title;  // Its legend entry.
  std::string csv;    // File name, relative to the PNG's directory.
  std::string x;
  std::string y;
  std::string where_column;
  std::string where_value;
  std::string style = "linespoints";  // gnuplot's `with` style: linespoints, points, lines.
  // A band instead of a line: when both are set, the area between columns `y_low` and `y_high`
  // is filled (translucent; `y` and `style` are then unused).
  std::string y_low;
  std::string y_high;
};

struct Plot {
  std::string title;
  std::string xlabel;  // With units, e.g. "GPUs" or "step time (s)".
  std::string ylabel;
  bool logx = false;  // Base 2.
  bool logy = false;
  std::optional<double> ymin, ymax;
  int width = 900, height = 600;  // Pixels.
  bool key_below = false;  // The legend under the plot, one series a line (long labels), not right.
  std::vector<PlotSeries> series;
};

// The gnuplot script drawing `plot` into `png_name` (a file name), with each series' columns
// resolved against the header of its CSV in `dir`. NotFound naming the file or column;
// InvalidArgument for a plot without series or labels.
absl::StatusOr<std::string> PlotScript(const Plot& plot, const std::string& dir,
                                       const std::string& png_name);

// Writes PlotScript to `png_path`.gp and runs gnuplot on it in the PNG's directory.
// FailedPrecondition (one line: install gnuplot-nox, as tools/setup.sh does) when gnuplot is not
// on PATH; Internal when it fails or writes no PNG.
absl::Status DrawPlot(const Plot& plot, const std::string& png_path);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_PLOT_H_
