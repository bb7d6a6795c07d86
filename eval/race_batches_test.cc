// RACE micro-batches against the data library's own layout of whole groups (LayoutRaceGroup, whose
// ids race_layout_test checks against a Python reference), on the fixture tree with the real BERT
// tokenizer; the epoch order's properties (a permutation, reproducible, unbiased).
#include "eval/race_batches.h"

#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "data/tokenizers/testutil.h"
#include "eval/race.h"
#include "eval/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using ::testing::HasSubstr;

using Ids = std::vector<int32_t>;

std::vector<RaceGroup> Fixture() {
  auto groups = ReadRace(TestDataPath("RACE"), {std::string("dev"), std::string("train")});
  EXPECT_TRUE(groups.ok()) << groups.status();
  return *groups;
}

// Rows [4q, 4q + 4) of a [rows, L] array.
Ids QuestionRows(const std::vector<int32_t>& a, int64_t L, int64_t q) {
  return Ids(a.begin() + q * kRaceChoices * L, a.begin() + (q + 1) * kRaceChoices * L);
}

Ids ViewRows(const TensorView& v, int64_t L, int64_t q) {
  const int32_t* p = v.data_as<int32_t>();
  return Ids(p + q * kRaceChoices * L, p + (q + 1) * kRaceChoices * L);
}

TEST(ListRaceQuestionsTest, EveryQuestionInOrder) {
  const std::vector<RaceGroup> groups = Fixture();
  const std::vector<RaceQuestionRef> all = ListRaceQuestions(groups);
  int64_t expected = 0;
  for (const RaceGroup& g : groups) expected += g.num_questions();
  ASSERT_EQ(static_cast<int64_t>(all.size()), expected);
  ASSERT_GT(expected, 4);
  // Sorted by (group, article, question) and each one exists.
  for (size_t k = 1; k < all.size(); ++k) {
    const RaceQuestionRef &a = all[k - 1], &b = all[k];
    EXPECT_LT(std::make_tuple(a.group, a.article, a.question),
              std::make_tuple(b.group, b.article, b.question));
  }
  const std::vector<RaceQuestionRef> second = ListRaceQuestions(groups, 1);
  EXPECT_EQ(static_cast<int64_t>(second.size()), groups[1].num_questions());
  for (const RaceQuestionRef& r : second) EXPECT_EQ(r.group, 1);
}

// Whole groups, and a shuffled selection across groups with an odd length that cuts articles:
// each question's 4 rows are exactly its rows in LayoutRaceGroup's layout of its group.
class RaceBatcherTest : public data::testing::TokenizerTest {};

TEST_F(RaceBatcherTest, RowsAreThoseOfTheGroupLayout) {
  const std::vector<RaceGroup> groups = Fixture();
  const data::Tokenizer& bert = data::testing::Bert();
  for (const int64_t L : {int64_t{64}, int64_t{29}}) {
    const RaceLayoutOptions options{L, 7};
    std::vector<RaceRows> reference;
    for (const RaceGroup& g : groups) {
      auto rows = LayoutRaceGroup(bert, g, options);
      ASSERT_TRUE(rows.ok()) << rows.status();
      reference.push_back(*rows);
    }
    // Index of each question within its group.
    std::map<std::tuple<int, int, int>, int64_t> index;
    const std::vector<RaceQuestionRef> all = ListRaceQuestions(groups);
    std::vector<int64_t> within(groups.size(), 0);
    for (const RaceQuestionRef& r : all)
      index[{r.group, r.article, r.question}] = within[r.group]++;

    RaceBatcher batcher(&bert, options);
    for (const uint64_t seed : {0, 1, 2}) {
      const std::vector<int64_t> order = ShuffledOrder(static_cast<int64_t>(all.size()), seed, 0);
      std::vector<RaceQuestionRef> some;
      for (size_t k = 0; k < 5 && k < order.size(); ++k) some.push_back(all[order[k]]);
      if (seed == 0) some = ListRaceQuestions(groups, 0);  // A whole group, articles together.
      auto batch = batcher.Layout(groups, some);
      ASSERT_TRUE(batch.ok()) << batch.status();
      const int64_t Q = static_cast<int64_t>(some.size());
      ASSERT_EQ(batch->tokens.shape, (Shape{Q * kRaceChoices, L}));
      ASSERT_EQ(batch->token_types.shape, (Shape{Q * kRaceChoices, L}));
      ASSERT_EQ(batch->padding_mask.shape, (Shape{Q * kRaceChoices, L}));
      ASSERT_EQ(batch->labels.shape, (Shape{Q}));
      for (int64_t q = 0; q < Q; ++q) {
        const RaceQuestionRef& r = some[q];
        const RaceRows& ref = reference[r.group];
        const int64_t i = index[{r.group, r.article, r.question}];
        SCOPED_TRACE(testing::Message() << "L " << L << " seed " << seed << " question " << q);
        EXPECT_EQ(ViewRows(batch->tokens, L, q), QuestionRows(ref.tokens, L, i));
        EXPECT_EQ(ViewRows(batch->token_types, L, q), QuestionRows(ref.token_types, L, i));
        EXPECT_EQ(ViewRows(batch->padding_mask, L, q), QuestionRows(ref.padding_mask, L, i));
        EXPECT_EQ(batch->labels.data_as<int32_t>()[q], ref.labels[i]);
        EXPECT_EQ(batcher.rows().labels[q], ref.labels[i]);
      }
    }
  }
}

TEST_F(RaceBatcherTest, Errors) {
  const std::vector<RaceGroup> groups = Fixture();
  RaceBatcher batcher(&data::testing::Bert(), {32, 16});
  EXPECT_THAT(batcher.Layout(groups, {}).status().message(), HasSubstr("no questions"));
  for (const RaceQuestionRef bad : {RaceQuestionRef{9, 0, 0}, RaceQuestionRef{0, 99, 0},
                                    RaceQuestionRef{0, 0, 99}, RaceQuestionRef{-1, 0, 0}}) {
    const absl::Status s = batcher.Layout(groups, {bad}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.message(), HasSubstr("no question"));
  }
  // A tokenizer without [CLS]: the data library's error.
  RaceBatcher gpt(&data::testing::Gpt2(), {32, 16});
  EXPECT_THAT(gpt.Layout(groups, {RaceQuestionRef{0, 0, 0}}).status().message(),
              HasSubstr("[CLS]"));
}

TEST(ShuffledOrderTest, AReproduciblePermutationPerSeedAndEpoch) {
  for (const int64_t n : {0, 1, 2, 7, 100}) {
    const std::vector<int64_t> order = ShuffledOrder(n, 1234, 3);
    ASSERT_EQ(static_cast<int64_t>(order.size()), n);
    EXPECT_EQ(std::set<int64_t>(order.begin(), order.end()).size(), static_cast<size_t>(n));
    for (int64_t i : order) EXPECT_TRUE(i >= 0 && i < n);
    EXPECT_EQ(ShuffledOrder(n, 1234, 3), order);
  }
  // Epochs and seeds give other orders (with 100! orders, a repeat would be a bug).
  EXPECT_NE(ShuffledOrder(100, 1234, 1), ShuffledOrder(100, 1234, 2));
  EXPECT_NE(ShuffledOrder(100, 1234, 1), ShuffledOrder(100, 99, 1));
}

// Every permutation of 4 items equally likely over 24,000 seeds: a chi-square test with 23
// degrees of freedom (P(chi2 > 60) < 1e-4 for an unbiased shuffle; an off-by-one in the swap
// index, say, makes some permutations impossible and the statistic huge).
TEST(ShuffledOrderTest, Unbiased) {
  std::map<std::vector<int64_t>, int> counts;
  const int draws = 24000;
  for (int s = 0; s < draws; ++s) ++counts[ShuffledOrder(4, static_cast<uint64_t>(s) * 7919, 0)];
  ASSERT_EQ(counts.size(), 24u);
  const double expected = draws / 24.0;
  double chi2 = 0;
  for (const auto& [perm, c] : counts) chi2 += (c - expected) * (c - expected) / expected;
  EXPECT_LT(chi2, 60.0);
}

}  // namespace
}  // namespace eval
}  // namespace mt
