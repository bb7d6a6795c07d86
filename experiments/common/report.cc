#include "experiments/common/report.h"

#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "core/status.h"
#include "core/subprocess.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "glog/logging.h"

namespace mt {
namespace experiments {
namespace {

// mkdir -p. False with errno set on failure.
bool MakeDirs(const std::string& path) {
  std::string prefix;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    prefix = path.substr(0, i);
    if (prefix.empty()) continue;
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode)) {
    errno = ENOTDIR;
    return false;
  }
  return true;
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon != std::string::npos) {
      return std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
    }
  }
  return "unknown CPU";
}

}  // namespace

absl::StatusOr<std::string> ResolveResultsDir(absl::string_view name,
                                              absl::string_view override_dir,
                                              absl::string_view workspace_dir) {
  if (name.empty() || name.find('/') != absl::string_view::npos || name == "." || name == "..") {
    return absl::InvalidArgumentError(
        absl::StrCat("experiment name '", name, "' must be one path component"));
  }
  std::string dir;
  if (!override_dir.empty()) {
    dir = std::string(override_dir);
  } else if (!workspace_dir.empty()) {
    dir = absl::StrCat(workspace_dir, "/results/", name);
  } else {
    dir = absl::StrCat("results/", name);
  }
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  if (!MakeDirs(dir)) {
    return absl::PermissionDeniedError(absl::StrCat("results directory ", dir,
                                                    " cannot be created: ", std::strerror(errno),
                                                    " (pass --results_dir=DIR)"));
  }
  if (access(dir.c_str(), W_OK | X_OK) != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat("results directory ", dir, " is not writable (pass --results_dir=DIR)"));
  }
  return dir;
}

MachineInfo DescribeMachine() {
  MachineInfo m;
  m.cpu_model = CpuModel();
  m.cores = static_cast<int>(std::thread::hardware_concurrency());
  struct utsname u;
  if (uname(&u) == 0) m.os = absl::StrCat(u.sysname, " ", u.release, " ", u.machine);
  return m;
}

std::string ShellQuote(absl::string_view arg) {
  if (arg.empty()) return "''";
  bool plain = true;
  for (char c : arg) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
          std::strchr("-_=./,:@%+", c) != nullptr)) {
      plain = false;
    }
  }
  if (plain) return std::string(arg);
  return absl::StrCat("'", absl::StrReplaceAll(arg, {{"'", "'\\''"}}), "'");
}

std::string CommandLine(int argc, const char* const* argv) {
  std::vector<std::string> parts;
  for (int i = 0; i < argc; ++i) parts.push_back(ShellQuote(argv[i]));
  return absl::StrJoin(parts, " ");
}

std::string ExperimentRun::Path(absl::string_view file) const {
  return absl::StrCat(results_dir, "/", file);
}

double ExperimentRun::WallSeconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_steady).count();
}

int ExperimentMain(absl::string_view name, int argc, char** argv,
                   const std::function<absl::Status(int argc, char** argv)>& run) {
  // The report records the command as given: gflags reorders argv, not the strings.
  std::vector<char*> original(argv, argv + argc);
  const std::string name_text(name);
  return ToolMain(name_text.c_str(), name_text.c_str(), argc, argv,
                  [&] { return run(static_cast<int>(original.size()), original.data()); });
}

std::string SourceRevision(const std::string& dir) {
  if (dir.empty()) return "unknown: not run from a checkout (use ./bazelw run)";
  const absl::StatusOr<std::string> head =
      RunCommand({"git", "-C", dir, "rev-parse", "HEAD"}, "", Stderr::kDiscard);
  if (absl::IsNotFound(head.status())) return "unknown: git is not installed";
  if (!head.ok()) return absl::StrCat("unknown: ", dir, " is not a git checkout");
  // results/ holds what the experiments write, not source: one experiment's fresh report does
  // not make the next one's tree dirty.
  const absl::StatusOr<std::string> changes =
      RunCommand({"git", "-C", dir, "status", "--porcelain", "--untracked-files=no", "--", ".",
                  ":(exclude)results"},
                 "", Stderr::kDiscard);
  const std::string sha(absl::StripAsciiWhitespace(*head));
  if (!changes.ok()) return absl::StrCat(sha, " (git status failed)");
  return absl::StripAsciiWhitespace(*changes).empty()
             ? sha
             : absl::StrCat(sha, " with uncommitted changes");
}

std::string PortablePaths(absl::string_view text, const std::string& workspace,
                          const std::string& home) {
  // Runfiles trees first: they may lie under the home directory (Bazel's output base).
  constexpr absl::string_view kRunfiles = ".runfiles/megatron_cpp/";
  std::string out;
  size_t done = 0;
  for (size_t at = text.find(kRunfiles); at != absl::string_view::npos;
       at = text.find(kRunfiles, done)) {
    // Back to the start of the path: a space, quote, backtick, '(', '=' or ':' before it.
    size_t start = at;
    while (start > done && !absl::ascii_isspace(text[start - 1]) &&
           !absl::StrContains("`'\"(=:", text[start - 1])) {
      --start;
    }
    absl::StrAppend(&out, text.substr(done, start - done), "bazel-bin/");
    done = at + kRunfiles.size();
  }
  absl::StrAppend(&out, text.substr(done));
  std::vector<std::pair<std::string, std::string>> replacements;
  if (!workspace.empty()) replacements.push_back({absl::StrCat(workspace, "/"), ""});
  if (!home.empty()) replacements.push_back({absl::StrCat(home, "/"), "~/"});
  return absl::StrReplaceAll(out, replacements);
}

absl::StatusOr<ExperimentRun> StartExperiment(absl::string_view name,
                                              absl::string_view results_dir_flag, int argc,
                                              const char* const* argv) {
  ExperimentRun run;
  run.started = std::chrono::system_clock::now();
  run.started_steady = std::chrono::steady_clock::now();
  run.name = std::string(name);
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  const absl::string_view ws = workspace != nullptr ? workspace : "";
  auto dir = ResolveResultsDir(name, results_dir_flag, ws);
  if (!dir.ok()) return dir.status();
  run.results_dir = *dir;
  run.workspace = std::string(ws);
  run.commit = SourceRevision(run.workspace);
  if (!ws.empty()) {  // Under `bazel run`: the command a person types.
    run.command = absl::StrCat("./bazelw run //experiments/", name);
    if (argc > 1) absl::StrAppend(&run.command, " --");
    for (int i = 1; i < argc; ++i) absl::StrAppend(&run.command, " ", ShellQuote(argv[i]));
  } else {
    run.command = CommandLine(argc, argv);
  }
  return run;
}

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

void Table::AddRow(std::vector<std::string> row) {
  CHECK_EQ(row.size(), header_.size()) << "table row width";
  rows_.push_back(std::move(row));
}

std::string CsvField(absl::string_view field) {
  const bool quote = field.find_first_of(",\"\r\n") != absl::string_view::npos ||
                     (!field.empty() && (field.front() == ' ' || field.back() == ' '));
  if (!quote) return std::string(field);
  return absl::StrCat("\"", absl::StrReplaceAll(field, {{"\"", "\"\""}}), "\"");
}

std::string Table::ToCsv() const {
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::vector<std::string> quoted;
    for (const auto& c : cells) quoted.push_back(CsvField(c));
    absl::StrAppend(&out, absl::StrJoin(quoted, ","), "\n");
  };
  line(header_);
  for (const auto& r : rows_) line(r);
  return out;
}

std::string Table::ToMarkdown() const {
  auto cell = [](const std::string& s) {
    return absl::StrReplaceAll(s, {{"|", "\\|"}, {"\n", " "}});
  };
  auto line = [&](const std::vector<std::string>& cells) {
    std::vector<std::string> escaped;
    for (const auto& c : cells) escaped.push_back(cell(c));
    return absl::StrCat("| ", absl::StrJoin(escaped, " | "), " |\n");
  };
  std::string out = line(header_);
  absl::StrAppend(&out, "|", absl::StrJoin(std::vector<std::string>(header_.size(), "---"), "|"),
                  "|\n");
  for (const auto& r : rows_) absl::StrAppend(&out, line(r));
  return out;
}

absl::Status WriteFile(const std::string& path, absl::string_view contents) {
  const std::string tmp = absl::StrCat(path, ".tmp.", getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", path));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status WriteCsv(const std::string& path, const Table& table) {
  return WriteFile(path, table.ToCsv());
}

Report::Report(std::string title) : title_(std::move(title)) {}

void Report::Heading(absl::string_view text) { parts_.push_back(absl::StrCat("## ", text)); }
void Report::Paragraph(absl::string_view markdown) { parts_.emplace_back(markdown); }
void Report::AddTable(const Table& table) { parts_.push_back(table.ToMarkdown()); }
void Report::Image(absl::string_view file, absl::string_view alt) {
  parts_.push_back(absl::StrCat("![", alt, "](", file, ")"));
}
void Report::Code(absl::string_view text) {
  parts_.push_back(absl::StrCat("```\n", absl::StripSuffix(text, "\n"), "\n```"));
}

std::string Report::Render(const ExperimentRun& run, const MachineInfo& machine,
                           double wall_seconds) const {
  std::string out = absl::StrCat("# ", title_, "\n\n");
  for (const auto& p : parts_) absl::StrAppend(&out, absl::StripSuffix(p, "\n"), "\n\n");
  absl::StrAppend(&out, "## Run\n\n");
  absl::StrAppend(&out, "- command: `", run.command, "`\n");
  absl::StrAppend(&out, "- commit: ", run.commit.empty() ? "unknown" : run.commit, "\n");
  absl::StrAppend(&out, "- machine: ", machine.cpu_model, ", ", machine.cores, " cores",
                  machine.os.empty() ? "" : absl::StrCat(", ", machine.os), "\n");
  absl::StrAppend(
      &out, "- date: ",
      absl::FormatTime("%Y-%m-%d %H:%M:%S UTC", absl::FromChrono(run.started), absl::UTCTimeZone()),
      "\n");
  absl::StrAppend(&out, "- wall time: ", Fixed(wall_seconds, 1), " s\n");
  const char* home = std::getenv("HOME");
  return PortablePaths(out, run.workspace, home != nullptr ? home : "");
}

absl::Status Report::Write(const ExperimentRun& run) const {
  const std::string path = run.Path("report.md");
  RETURN_IF_ERROR(WriteFile(path, Render(run, DescribeMachine(), run.WallSeconds())));
  std::printf("%s: wrote %s\n", run.name.c_str(), path.c_str());
  return absl::OkStatus();
}

std::string Fixed(double value, int digits) { return absl::StrFormat("%.*f", digits, value); }

}  // namespace experiments
}  // namespace mt
