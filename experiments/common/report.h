// The shared scaffolding of the experiments (experiments/<name>/): where results go, tables as
// CSV and Markdown, the report.md every experiment writes (our numbers beside the paper's, the
// exact command, the machine, the date and the wall time), and subprocesses.
//
// An experiment's main() does, in order:
//   ASSIGN_OR_RETURN(ExperimentRun run, StartExperiment("table1_weak_scaling",
//                                                        config.results_dir, argc, argv));
//   Table t({"params", "gpus"}); t.AddRow({"1.2B", "1"}); ...
//   RETURN_IF_ERROR(WriteCsv(run.Path("efficiency.csv"), t));
//   Report report("Table 1: weak scaling");
//   report.Paragraph("..."); report.AddTable(t); report.Image("efficiency.png", "...");
//   RETURN_IF_ERROR(report.Write(run));   // report.md, with the run's command, machine, time
// Libraries never read flags: the --results_dir value is passed in.
#ifndef MT_EXPERIMENTS_COMMON_REPORT_H_
#define MT_EXPERIMENTS_COMMON_REPORT_H_

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/config_flags.h"

namespace mt {
namespace experiments {

// The directory an experiment writes, created if missing: `override_dir` if non-empty, else
// `<workspace_dir>/results/<name>` when `workspace_dir` is non-empty (`bazel run` sets
// BUILD_WORKSPACE_DIRECTORY), else `results/<name>` under the current directory.
// InvalidArgument for an empty or path-like name; PermissionDenied (naming the directory) when it
// cannot be created or written.
absl::StatusOr<std::string> ResolveResultsDir(absl::string_view name,
                                              absl::string_view override_dir,
                                              absl::string_view workspace_dir);

// The machine a run happened on: the CPU model (/proc/cpuinfo), the cores this process may use,
// and the kernel (uname).
struct MachineInfo {
  std::string cpu_model;
  int cores = 0;
  std::string os;
};
MachineInfo DescribeMachine();

// argv as a shell command a person can paste: arguments with characters the shell would
// interpret are single-quoted.
std::string ShellQuote(absl::string_view arg);
std::string CommandLine(int argc, const char* const* argv);

// The source a run was built from: the commit of the checkout at `dir` and whether its tracked
// files outside results/ had changes not committed ("<sha>" / "<sha> with uncommitted changes"),
// so that the experiments' own reports do not count; "unknown: ..."
// saying why when `dir` is empty, not a git checkout, or git cannot be run.
std::string SourceRevision(const std::string& dir);

// `text` with this machine's paths made portable: a binary in any runfiles tree of the workspace
// ("/.../x.runfiles/megatron_cpp/jobs/bench/train_step_bench") becomes its bazel-bin path
// ("bazel-bin/jobs/bench/train_step_bench"), paths under `workspace` become relative to it, and
// paths under `home` start with "~/". Empty `workspace` or `home`: those are left alone.
std::string PortablePaths(absl::string_view text, const std::string& workspace,
                          const std::string& home);

// One run of an experiment: where it writes, its command, and when it started.
struct ExperimentRun {
  std::string name;
  std::string results_dir;
  std::string command;    // The exact command line (with `bazel run`'s target when known).
  std::string commit;     // SourceRevision of the workspace ("unknown: ..." outside bazel run).
  std::string workspace;  // The checkout under `bazel run`; empty otherwise.
  std::chrono::system_clock::time_point started;
  std::chrono::steady_clock::time_point started_steady;

  // results_dir/file.
  std::string Path(absl::string_view file) const;
  double WallSeconds() const;
};

// The main() of an experiment binary: every tool's start-up (core/tool_main.h: the flags parsed,
// a positional argument refused, "<name>: error: <message>" and exit 1 on an error), with `run`
// given the original argv (so that the report records the exact command).
int ExperimentMain(absl::string_view name, int argc, char** argv,
                   const std::function<absl::Status(int argc, char** argv)>& run);

// ExperimentMain with the flags of `Config` (core/config_flags.h: one flag per field of its
// table, `defaults` the flags' defaults, defined in the caller's file): run(config, argc, argv)
// gets `defaults` with the flags given on the command line applied.
template <typename Config, typename Run>
int ExperimentMain(absl::string_view name, int argc, char** argv, const Config& defaults,
                   const Run& run, const char* main_file = __builtin_FILE()) {
  const ConfigFlags<Config> flags(defaults, {}, main_file);  // Registered before parsing.
  return ExperimentMain(name, argc, argv, [&](int argc, char** argv) {
    const absl::StatusOr<Config> c = flags.WithGiven(defaults);
    return c.ok() ? run(*c, argc, argv) : c.status();
  });
}

// Resolves the results directory (reading BUILD_WORKSPACE_DIRECTORY) and records the command,
// the commit and the start time. Errors as ResolveResultsDir.
absl::StatusOr<ExperimentRun> StartExperiment(absl::string_view name,
                                              absl::string_view results_dir_flag, int argc,
                                              const char* const* argv);

// A table of strings with a header: rendered as CSV (RFC 4180 quoting) or a Markdown table.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  // CHECK-fails when the row's width is not the header's (a programming error).
  void AddRow(std::vector<std::string> row);

  const std::vector<std::string>& header() const { return header_; }
  const std::vector<std::vector<std::string>>& rows() const { return rows_; }
  std::string ToCsv() const;
  std::string ToMarkdown() const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

// A CSV field: quoted (with doubled quotes) when it holds a comma, a quote, CR or LF, or
// leading/trailing spaces.
std::string CsvField(absl::string_view field);

// Writes `contents` to `path` atomically (a temporary file renamed over it). Internal error
// naming the path on failure.
absl::Status WriteFile(const std::string& path, absl::string_view contents);
absl::Status WriteCsv(const std::string& path, const Table& table);

// report.md: a title, then the parts in the order added, then a "Run" section with the command,
// the commit, the machine, the date (UTC) and the wall time; every path in it portable
// (PortablePaths: no path of the machine it ran on).
class Report {
 public:
  explicit Report(std::string title);
  void Heading(absl::string_view text);  // A "## " section heading.
  void Paragraph(absl::string_view markdown);
  void AddTable(const Table& table);
  void Image(absl::string_view file, absl::string_view alt);  // A PNG in the results dir.
  void Code(absl::string_view text);                          // A fenced block.

  // The whole document for `run` on `machine`, `wall_seconds` after it started.
  std::string Render(const ExperimentRun& run, const MachineInfo& machine,
                     double wall_seconds) const;
  // Renders with DescribeMachine() and run.WallSeconds(), writes run.Path("report.md") and prints
  // "<run.name>: wrote <path>".
  absl::Status Write(const ExperimentRun& run) const;

 private:
  std::string title_;
  std::vector<std::string> parts_;
};

// Formats a number with `digits` decimals (printf %.*f).
std::string Fixed(double value, int digits);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_REPORT_H_
