#include "experiments/race_finetune/race_tables.h"

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

}  // namespace
}  // namespace experiments
}  // namespace mt
