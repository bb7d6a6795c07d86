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

}  // namespace
}  // namespace experiments
}  // namespace mt
