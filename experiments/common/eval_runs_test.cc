#include "experiments/common/eval_runs.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace experiments {

namespace {

TEST(LastJsonLineTest, ParsesTheLastNonEmptyLine) {
  auto j = LastJsonLine("progress 1/2\n{\"a\": 1}\n{\"b\": {\"c\": 2.5}, \"d\": \"x\"}\n\n  ", "p");
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(NumberAt(*j, {"b", "c"}, "p").value(), 2.5);
  EXPECT_FALSE(j->contains("a"));
  EXPECT_EQ(NumberAt(*j, {"b", "e"}, "p").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(NumberAt(*j, {"d"}, "p").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(NumberAt(*j, {"d", "x"}, "p").status().code(), absl::StatusCode::kNotFound);
}

TEST(LastJsonLineTest, RejectsOtherLines) {
  for (const char* out : {"", "\n\n", "{\"a\": 1}\nnot json", "[1, 2]", "{\"a\": 1"}) {
    auto j = LastJsonLine(out, "wikitext103");
    EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument) << out;
    EXPECT_NE(j.status().message().find("wikitext103"), std::string::npos);
  }
}

TEST(RunForJsonTest, RunsTheLauncherAndTheProgram) {
  auto j = RunForJson({"/usr/bin/env"}, {"echo", "line\n{\"accuracy\": 0.75}"});
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ(NumberAt(*j, {"accuracy"}, "echo").value(), 0.75);
  EXPECT_FALSE(RunForJson({}, {"false"}).ok());
}

TEST(LauncherTest, SplitsOnSpacesAndRunsThePrefix) {
  EXPECT_EQ(LauncherWords("mpirun  -np 8 "), (std::vector<std::string>{"mpirun", "-np", "8"}));
  EXPECT_TRUE(LauncherWords("").empty());
  // The launcher's words come first: env sets X for the program it runs.
  auto out = RunLaunched(LauncherWords("/usr/bin/env X=launched"), {"sh", "-c", "echo $X"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "launched\n");
  EXPECT_EQ(RunLaunched({}, {"echo", "plain"}).value_or(""), "plain\n");
  EXPECT_FALSE(RunLaunched({"false"}, {"echo", "never"}).ok());
}

// 20 steps of 8 sequences: 160 samples, a tenth of them warmup, a log line every 2 steps, one
// validation at the end; micro-batches of the global batch when none is given.
TEST(PretrainArgsTest, SpellsTheShortRunsSchedule) {
  const PretrainRun r{"/d/corpus", "/w/ckpt", 2, 64, 4, {32, 8, 0, 20, 1e-3, DeviceType::kCuda}};
  const std::vector<std::string> want = {"--data_path=/d/corpus",  "--num_layers=2",
                                         "--hidden_size=64",       "--num_attention_heads=4",
                                         "--seq_length=32",        "--max_position_embeddings=32",
                                         "--micro_batch_size=8",   "--global_batch_size=8",
                                         "--train_iters=20",       "--lr=0.001",
                                         "--min_lr=0.0001",        "--lr_warmup_samples=16",
                                         "--lr_decay_samples=160", "--log_interval=2",
                                         "--eval_interval=20",     "--eval_iters=2",
                                         "--device=cuda",          "--save=/w/ckpt",
                                         "--keep_last=1"};
  EXPECT_EQ(PretrainArgs(r), want);
  PretrainRun one = r;
  one.schedule.micro_batch = 2;
  one.schedule.iters = 5;
  one.schedule.device = DeviceType::kCpu;
  const std::vector<std::string> args = PretrainArgs(one);
  EXPECT_EQ(args[6], "--micro_batch_size=2");
  EXPECT_EQ(args[13], "--log_interval=1");  // At least every step.
  EXPECT_EQ(args[16], "--device=cpu");
  one.schedule.dropout = 0;  // Set: both dropouts, after the schedule's flags.
  const std::vector<std::string> with_dropout = PretrainArgs(one);
  ASSERT_EQ(with_dropout.size(), args.size() + 2);
  EXPECT_EQ(with_dropout[args.size()], "--hidden_dropout=0");
  EXPECT_EQ(with_dropout[args.size() + 1], "--attention_dropout=0");
}

TEST(CommaListTest, DropsEmptyItems) {
  EXPECT_EQ(CommaList("a,,b,"), (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(CommaList("").empty());
}

TEST(RunfilePathTest, MissingIsNotFound) {
  auto p = RunfilePath("/nonexistent/binary", "eval/no_such_file");
  EXPECT_EQ(p.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(p.status().message().find("eval/no_such_file"), std::string::npos);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
