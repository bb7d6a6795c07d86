#include "experiments/common/report.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "core/file_system.h"
#include "core/subprocess.h"
#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

std::string TempDir() {
  const char* t = std::getenv("TEST_TMPDIR");
  return t != nullptr ? t : "/tmp";
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(CsvTest, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(CsvField("1.2B"), "1.2B");
  EXPECT_EQ(CsvField(""), "");
  EXPECT_EQ(CsvField("a,b"), "\"a,b\"");
  EXPECT_EQ(CsvField("say \"hi\""), "\"say \"\"hi\"\"\"");
  EXPECT_EQ(CsvField("two\nlines"), "\"two\nlines\"");
  EXPECT_EQ(CsvField(" padded"), "\" padded\"");
}

TEST(CsvTest, TableRoundTripsThroughAFile) {
  Table t({"params", "gpus", "note"});
  t.AddRow({"1.2B", "1", "baseline, 39 TFLOP/s"});
  t.AddRow({"8.3B", "512", "x"});
  EXPECT_EQ(t.ToCsv(), "params,gpus,note\n1.2B,1,\"baseline, 39 TFLOP/s\"\n8.3B,512,x\n");
  const std::string path = TempDir() + "/t.csv";
  ASSERT_TRUE(WriteCsv(path, t).ok());
  EXPECT_EQ(ReadAll(path), t.ToCsv());
}

TEST(TableTest, MarkdownEscapesPipes) {
  Table t({"a", "b|c"});
  t.AddRow({"1", "x|y"});
  EXPECT_EQ(t.ToMarkdown(), "| a | b\\|c |\n|---|---|\n| 1 | x\\|y |\n");
}

TEST(ResultsDirTest, OverrideThenWorkspaceThenCurrentDirectory) {
  const std::string base = TempDir() + "/rd";
  auto a = ResolveResultsDir("exp", base + "/custom/", "/nonexistent-workspace");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, base + "/custom");
  struct stat st;
  EXPECT_EQ(stat(a->c_str(), &st), 0);
  auto b = ResolveResultsDir("exp", "", base + "/ws");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b, base + "/ws/results/exp");
  EXPECT_EQ(stat(b->c_str(), &st), 0);
  EXPECT_EQ(*ResolveResultsDir("exp", "", ""), "results/exp");
}

TEST(ResultsDirTest, ClearErrors) {
  auto bad = ResolveResultsDir("exp", "/dev/null/sub", "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_NE(bad.status().message().find("/dev/null/sub"), absl::string_view::npos);
  EXPECT_EQ(ResolveResultsDir("a/b", "", "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ResolveResultsDir("", "", "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CommandLineTest, QuotesForTheShell) {
  const char* argv[] = {"bin/x", "--flag=a b", "--ok=1.5", "it's"};
  EXPECT_EQ(CommandLine(4, argv), "bin/x '--flag=a b' --ok=1.5 'it'\\''s'");
}

TEST(ReportTest, RenderHasPartsCommandMachineDateAndWallTime) {
  Report r("Table 1");
  r.Heading("Efficiency");
  r.Paragraph("Ours beside the paper's.");
  Table t({"params", "paper_pct", "model_pct"});
  t.AddRow({"8.3B", "77", "76.4"});
  r.AddTable(t);
  r.Image("efficiency.png", "efficiency against GPUs");
  r.Code("a\nb\n");
  ExperimentRun run;
  run.command = "./bazelw run //experiments/x -- --flag=1";
  run.commit = "0123abc";
  run.started = std::chrono::system_clock::from_time_t(86400 * 365);  // 1971-01-01.
  MachineInfo m{"Test CPU @ 1 GHz", 2, "Linux"};
  const std::string out = r.Render(run, m, 12.34);
  EXPECT_EQ(out,
            "# Table 1\n\n## Efficiency\n\nOurs beside the paper's.\n\n"
            "| params | paper_pct | model_pct |\n|---|---|---|\n| 8.3B | 77 | 76.4 |\n\n"
            "![efficiency against GPUs](efficiency.png)\n\n```\na\nb\n```\n\n"
            "## Run\n\n- command: `./bazelw run //experiments/x -- --flag=1`\n"
            "- commit: 0123abc\n- machine: Test CPU @ 1 GHz, 2 cores, Linux\n- date: 1971-01-01 "
            "00:00:00 UTC\n"
            "- wall time: 12.3 s\n");
}

TEST(ReportTest, PortablePathsHideTheMachine) {
  const std::string text =
      "mpirun -np 2 /root/.cache/bazel/_bazel_root/30ef/execroot/megatron_cpp/bazel-out/k8-opt/"
      "bin/experiments/t/t.runfiles/megatron_cpp/jobs/bench/train_step_bench --x=1\n"
      "data: `/root/.cache/megatron-cpp/data/heldout.wiki.tokens`, "
      "results: '/work/ws/results/t/a.csv' and (/work/ws/x.runfiles/megatron_cpp/comm/comm_bench)";
  EXPECT_EQ(PortablePaths(text, "/work/ws", "/root"),
            "mpirun -np 2 bazel-bin/jobs/bench/train_step_bench --x=1\n"
            "data: `~/.cache/megatron-cpp/data/heldout.wiki.tokens`, "
            "results: 'results/t/a.csv' and (bazel-bin/comm/comm_bench)");
  EXPECT_EQ(PortablePaths("--bin=/o/x.runfiles/megatron_cpp/data/preprocess a:/o/y.runfiles/"
                          "megatron_cpp/b",
                          "/work/ws", "/root"),
            "--bin=bazel-bin/data/preprocess a:bazel-bin/b");
  EXPECT_EQ(PortablePaths("/a/b", "", ""), "/a/b");
}

TEST(ReportTest, SourceRevisionSaysWhyItIsUnknown) {
  EXPECT_EQ(SourceRevision("").rfind("unknown: not run from a checkout", 0), 0u);
  const std::string not_git = TempDir() + "/not_git";
  ASSERT_TRUE(DefaultFileSystem().CreateDirectories(not_git).ok());
  EXPECT_EQ(SourceRevision(not_git), "unknown: " + not_git + " is not a git checkout");
}

TEST(ReportTest, SourceRevisionOfACheckout) {
  // A repository made here: one commit, then a change to a tracked report (an experiment's
  // output: still clean), then to its tracked source file.
  const std::string repo = TempDir() + "/repo";
  ASSERT_TRUE(DefaultFileSystem().CreateDirectories(repo + "/results/e").ok());
  ASSERT_TRUE(WriteFile(repo + "/f", "1\n").ok());
  ASSERT_TRUE(WriteFile(repo + "/results/e/report.md", "1\n").ok());
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"git", "-C", repo, "init", "-q"},
        std::vector<std::string>{"git", "-C", repo, "add", "f", "results"},
        std::vector<std::string>{"git", "-C", repo, "-c", "user.name=t", "-c", "user.email=t@t",
                                 "commit", "-q", "-m", "one"}}) {
    ASSERT_TRUE(RunCommand(cmd).ok()) << cmd[3];
  }
  const absl::StatusOr<std::string> head = RunCommand({"git", "-C", repo, "rev-parse", "HEAD"});
  ASSERT_TRUE(head.ok());
  const std::string sha(absl::StripAsciiWhitespace(*head));
  ASSERT_EQ(sha.size(), 40u);
  EXPECT_EQ(SourceRevision(repo), sha);
  ASSERT_TRUE(WriteFile(repo + "/results/e/report.md", "2\n").ok());
  EXPECT_EQ(SourceRevision(repo), sha);
  ASSERT_TRUE(WriteFile(repo + "/f", "2\n").ok());
  EXPECT_EQ(SourceRevision(repo), sha + " with uncommitted changes");
}

TEST(ReportTest, WriteCreatesReportMdInTheResultsDir) {
  const char* argv[] = {"bin/exp", "--x=1"};
  auto run = StartExperiment("exp", TempDir() + "/w", 2, argv);
  ASSERT_TRUE(run.ok()) << run.status();
  Report r("T");
  ASSERT_TRUE(r.Write(*run).ok());
  const std::string md = ReadAll(TempDir() + "/w/report.md");
  EXPECT_EQ(md.rfind("# T\n", 0), 0u);
  EXPECT_NE(md.find("- wall time: "), std::string::npos);
  EXPECT_NE(md.find(DescribeMachine().cpu_model), std::string::npos);
  EXPECT_GT(DescribeMachine().cores, 0);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
