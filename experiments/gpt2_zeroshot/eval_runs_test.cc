#include "experiments/gpt2_zeroshot/eval_runs.h"

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
