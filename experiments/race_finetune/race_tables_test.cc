#include "experiments/race_finetune/race_tables.h"

#include <cstdlib>
#include <string>
#include <vector>

#include "core/file_system.h"
#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(ReadRaceAccuraciesTest, LevelsAndOverallPerSplit) {
  // The shape eval/race prints; test has no high questions here.
  const Json r = Json::parse(R"({"task": "race", "splits": {
      "dev/middle": {"questions": 4, "correct": 3, "accuracy": 0.75, "loss": 1.0},
      "dev/high": {"questions": 2, "correct": 0, "accuracy": 0.0, "loss": 1.0},
      "test/middle": {"questions": 5, "correct": 1, "accuracy": 0.2, "loss": 1.0},
      "dev": {"questions": 6, "correct": 3, "accuracy": 0.5, "loss": 1.0},
      "test": {"questions": 5, "correct": 1, "accuracy": 0.2, "loss": 1.0}},
      "questions": 11, "correct": 4, "accuracy": 0.36})");
  auto a = ReadRaceAccuracies(r);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_EQ(a->size(), 5u);
  EXPECT_EQ((*a)[0].split, "dev");
  EXPECT_EQ((*a)[0].subset, "middle");
  EXPECT_EQ((*a)[0].questions, 4);
  EXPECT_DOUBLE_EQ((*a)[0].accuracy_pct, 75.0);
  EXPECT_EQ((*a)[2].subset, "overall");
  EXPECT_DOUBLE_EQ((*a)[2].accuracy_pct, 50.0);
  EXPECT_EQ((*a)[3].split, "test");
  EXPECT_EQ((*a)[3].subset, "middle");
  EXPECT_EQ((*a)[4].subset, "overall");
  EXPECT_DOUBLE_EQ((*a)[4].accuracy_pct, 20.0);
}

TEST(ReadRaceAccuraciesTest, MissingKeysAreNotFound) {
  EXPECT_EQ(ReadRaceAccuracies(Json::parse(R"({"accuracy": 0.5})")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(
      ReadRaceAccuracies(Json::parse(R"({"splits": {"dev": {"questions": 3}}})")).status().code(),
      absl::StatusCode::kNotFound);
}

TEST(PaperRaceRowsTest, Table5) {
  const Table t = PaperRaceRows();
  ASSERT_EQ(t.rows().size(), 12u);
  EXPECT_EQ(t.rows()[0],
            (std::vector<std::string>{"paper Megatron-BERT 336M", "test", "middle", "86.9"}));
  EXPECT_EQ(t.rows()[8][3], "89.5");
  EXPECT_EQ(t.rows()[10][3], "90.0");
}

TEST(RaceFindingTest, SupportedOnlyWhenTheNumbersSaySo) {
  // 120 / 400 = 30%: P(X >= 120 | 400, 0.25) = 0.0133 (exact sum in float64):
  // not below 0.01.
  const std::string no = RaceFinding({{"small", 1, true, 400, 110},
                                      {"big", 2, true, 400, 120},
                                      {"big random", 2, false, 400, 118}});
  EXPECT_NE(no.find("Above chance (25%), p < 0.01: not supported"), std::string::npos) << no;
  EXPECT_NE(no.find("Pretrained above random initialisation: not supported"), std::string::npos);
  EXPECT_NE(no.find("Larger above smaller: not supported"), std::string::npos) << no;
  const std::string yes = RaceFinding({{"big random", 2, false, 400, 100},
                                       {"big", 2, true, 400, 160},
                                       {"small", 1, true, 400, 110}});
  EXPECT_NE(yes.find("Above chance (25%), p < 0.01: supported**: big 160 / 400 = 40.0%"),
            std::string::npos)
      << yes;
  EXPECT_NE(yes.find("Pretrained above random initialisation: supported"), std::string::npos);
  EXPECT_NE(yes.find("Larger above smaller: supported"), std::string::npos) << yes;
  EXPECT_NE(RaceFinding({{"big", 2, true, 400, 160}}).find("one size only"), std::string::npos);
}

// Two models right on the same 108 of 400 questions, the larger alone on 12 more and the smaller
// alone on 2: unpaired, 120 against 110 is z = 0.025 / 0.0320 = 0.78 (p = 0.22); paired, 12 of the
// 14 disagreements is P(X >= 12 | 14, 1/2) = (91 + 14 + 1) / 2^14 = 0.0065.
TEST(RaceFindingTest, PairedOutcomesAreComparedQuestionByQuestion) {
  std::vector<bool> big(400, false), small(400, false);
  for (int i = 0; i < 108; ++i) big[i] = small[i] = true;
  for (int i = 108; i < 120; ++i) big[i] = true;
  for (int i = 120; i < 122; ++i) small[i] = true;
  const std::string paired =
      RaceFinding({{"small", 1, true, 400, 110, small}, {"big", 2, true, 400, 120, big}});
  EXPECT_NE(paired.find("Larger above smaller: supported**"), std::string::npos) << paired;
  EXPECT_NE(paired.find("on the same 400 questions the first alone is right on 12 and the "
                        "second alone on 2: exact one-sided McNemar test p = 0.0065 (the "
                        "two-proportion z, which ignores the pairing, is 0.78)"),
            std::string::npos)
      << paired;
  const std::string unpaired =
      RaceFinding({{"small", 1, true, 400, 110}, {"big", 2, true, 400, 120, big}});
  EXPECT_NE(unpaired.find("Larger above smaller: not supported**"), std::string::npos);
  EXPECT_NE(unpaired.find("one-sided two-proportion z = 0.78, p = 0.22."), std::string::npos)
      << unpaired;
  // Dev outcomes beside them: a second McNemar test (the larger alone right on 3, the smaller on
  // 1: P(X >= 3 | 4, 1/2) = 5/16), which leaves the verdict to the test split.
  std::vector<bool> big_dev(20, false), small_dev(20, false);
  for (int i = 0; i < 5; ++i) big_dev[i] = small_dev[i] = true;
  for (int i = 5; i < 8; ++i) big_dev[i] = true;
  small_dev[8] = true;
  const std::string with_dev = RaceFinding(
      {{"small", 1, true, 400, 110, small, small_dev}, {"big", 2, true, 400, 120, big, big_dev}});
  EXPECT_NE(with_dev.find("Larger above smaller: supported**"), std::string::npos) << with_dev;
  EXPECT_NE(with_dev.find("  - The dev split, a second sample: 8 against 6 right of 20; the first "
                          "alone right on 3 and the second alone on 1: exact one-sided McNemar "
                          "test p = 0.31.\n"),
            std::string::npos)
      << with_dev;
  EXPECT_EQ(paired.find("The dev split"), std::string::npos);
  small.pop_back();
  const std::string mismatched =
      RaceFinding({{"small", 1, true, 400, 110, small}, {"big", 2, true, 400, 120, big}});
  EXPECT_NE(mismatched.find("(unpaired: ComparePaired: 400 against 399 outcomes)"),
            std::string::npos)
      << mismatched;
}

TEST(RaceOutcomesTest, OneSplitsLinesInLevelFileQuestionOrder) {
  const std::string dir = std::getenv("TEST_TMPDIR");
  const std::string path = dir + "/outcomes.jsonl";
  auto line = [](const char* split, const char* level, const char* file, int q, bool right) {
    return absl::StrCat(R"({"split": ")", split, R"(", "level": ")", level, R"(", "file": ")", file,
                        R"(", "question": )", q, R"(, "answer": 0, "predicted": 1, )",
                        R"("correct": )", right ? "true" : "false", "}\n");
  };
  ASSERT_TRUE(WriteFile(path, absl::StrCat(line("test", "middle", "2.txt", 0, true),
                                           line("dev", "high", "1.txt", 0, true),
                                           line("test", "high", "1.txt", 1, false),
                                           line("test", "high", "1.txt", 0, true),
                                           line("test", "middle", "10.txt", 0, false)))
                  .ok());
  auto o = RaceOutcomes(path, "test", 4);
  ASSERT_TRUE(o.ok()) << o.status();
  // high/1.txt#0, high/1.txt#1, middle/10.txt#0, middle/2.txt#0.
  EXPECT_EQ(*o, (std::vector<bool>{true, false, false, true}));
  EXPECT_EQ(RaceOutcomes(path, "test", 5).status().message(), path + " has 4 test questions for 5");
  auto dev = RaceOutcomes(path, "dev", 1);
  ASSERT_TRUE(dev.ok()) << dev.status();
  EXPECT_EQ(*dev, std::vector<bool>{true});
  ASSERT_TRUE(WriteFile(path, absl::StrCat(line("test", "high", "1.txt", 0, true),
                                           line("test", "high", "1.txt", 0, false)))
                  .ok());
  EXPECT_EQ(RaceOutcomes(path, "test", 2).status().message(),
            path + " line 2: question 0 of 1.txt (high) again");
  ASSERT_TRUE(WriteFile(path, "{\"split\": \"test\"}\n").ok());
  EXPECT_EQ(RaceOutcomes(path, "test", 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RaceOutcomes(dir + "/missing.jsonl", "test", 1).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace experiments
}  // namespace mt
