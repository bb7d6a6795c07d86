// The RACE sequence layout (with the real BERT WordPiece tokenizer; expected ids from
// data/tokenizers/testdata/bert_reference.py) and the scoring helpers.
#include <string>
#include <vector>

#include "data/tokenizers/testutil.h"
#include "eval/race.h"
#include "eval/testutil.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

using data::testing::Bert;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

using Ids = std::vector<int32_t>;

constexpr int32_t kCls = 101, kSep = 102, kPad = 0;

// "The cat sat on the mat. It was warm ." in bert-base-uncased ids (11).
const Ids kArticleIds = {1996, 4937, 2938, 2006, 1996, 13523, 1012, 2009, 2001, 4010, 1012};
// "Where did the cat sit? " + "On the mat" / "In the box" / "Under the bed" / "On the roof".
const Ids kQaIds[4] = {{2073, 2106, 1996, 4937, 4133, 1029, 2006, 1996, 13523},
                       {2073, 2106, 1996, 4937, 4133, 1029, 1999, 1996, 3482},
                       {2073, 2106, 1996, 4937, 4133, 1029, 2104, 1996, 2793},
                       {2073, 2106, 1996, 4937, 4133, 1029, 2006, 1996, 4412}};

RaceArticle CatArticle() {
  RaceArticle a;
  a.path = "cat.txt";
  a.article = "The cat sat on the mat.\n It was  warm .";
  a.questions.push_back(
      {"Where did the cat sit?", {"On the mat", "In the box", "Under the bed", "On the roof"}, 0});
  return a;
}

Ids Cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

Ids Prefix(const Ids& ids, size_t n) { return Ids(ids.begin(), ids.begin() + n); }

// Row r of a [rows, L] array.
Ids Row(const std::vector<int32_t>& a, int64_t L, int64_t r) {
  return Ids(a.begin() + r * L, a.begin() + (r + 1) * L);
}

RaceRows Layout(const RaceArticle& a, int64_t L, int64_t max_qa = 128) {
  RaceRows rows;
  const absl::Status s = AppendRaceArticle(Bert(), a, {L, max_qa}, &rows);
  EXPECT_TRUE(s.ok()) << s;
  return rows;
}

TEST(CleanRaceTextTest, Rules) {
  EXPECT_EQ(CleanRaceText("a\n\nb   c"), "a b c");
  EXPECT_EQ(CleanRaceText("  x \t "), "x");
  EXPECT_EQ(CleanRaceText("\u00a0x\u3000y"), "x y");
  EXPECT_EQ(CleanRaceText("end . Next"), "end. Next");
  EXPECT_EQ(CleanRaceText("end .\nNext"), "end. Next");
  // Three passes: the second joins what the first left.
  EXPECT_EQ(CleanRaceText("a . . b"), "a.. b");
  EXPECT_EQ(CleanRaceText("a . . . b"), "a. .. b");
  EXPECT_EQ(CleanRaceText("end ."), "end .");
}

class RaceLayoutTest : public data::testing::TokenizerTest {};

TEST_F(RaceLayoutTest, PaddedRowsByHand) {
  const int64_t L = 32;
  const RaceRows rows = Layout(CatArticle(), L);
  ASSERT_EQ(rows.seq_length, L);
  EXPECT_THAT(rows.labels, ElementsAre(0));
  ASSERT_EQ(rows.tokens.size(), 4u * L);
  ASSERT_EQ(rows.token_types.size(), 4u * L);
  ASSERT_EQ(rows.padding_mask.size(), 4u * L);
  // [CLS] qa(9) [SEP] article(11) [SEP] = 23, then 9 pads.
  const Ids types = Cat({Ids(11, 0), Ids(12, 1), Ids(9, 0)});
  const Ids mask = Cat({Ids(23, 1), Ids(9, 0)});
  for (int c = 0; c < 4; ++c) {
    EXPECT_THAT(
        Row(rows.tokens, L, c),
        ElementsAreArray(Cat({{kCls}, kQaIds[c], {kSep}, kArticleIds, {kSep}, Ids(9, kPad)})))
        << "option " << c;
    EXPECT_THAT(Row(rows.token_types, L, c), ElementsAreArray(types));
    EXPECT_THAT(Row(rows.padding_mask, L, c), ElementsAreArray(mask));
  }
}

TEST_F(RaceLayoutTest, LongArticleIsCutToFit) {
  // L = 16: the 22 tokens before the last [SEP] are cut to 15, keeping 4 article tokens.
  RaceRows rows = Layout(CatArticle(), 16);
  EXPECT_THAT(Row(rows.tokens, 16, 1),
              ElementsAreArray(Cat({{kCls}, kQaIds[1], {kSep}, Prefix(kArticleIds, 4), {kSep}})));
  EXPECT_THAT(Row(rows.token_types, 16, 1), ElementsAreArray(Cat({Ids(11, 0), Ids(5, 1)})));
  EXPECT_THAT(Row(rows.padding_mask, 16, 1), ElementsAreArray(Ids(16, 1)));
  // L = 23: 22 tokens fit under L, so nothing is cut and the [SEP] makes it exactly L.
  rows = Layout(CatArticle(), 23);
  EXPECT_THAT(Row(rows.tokens, 23, 0),
              ElementsAreArray(Cat({{kCls}, kQaIds[0], {kSep}, kArticleIds, {kSep}})));
  // L = 22: 22 tokens are not < L, so the last article token goes.
  rows = Layout(CatArticle(), 22);
  EXPECT_THAT(Row(rows.tokens, 22, 0),
              ElementsAreArray(Cat({{kCls}, kQaIds[0], {kSep}, Prefix(kArticleIds, 10), {kSep}})));
  EXPECT_THAT(Row(rows.token_types, 22, 0), ElementsAreArray(Cat({Ids(11, 0), Ids(11, 1)})));
}

TEST_F(RaceLayoutTest, LongQuestionIsCutToMaxQaLength) {
  const RaceRows rows = Layout(CatArticle(), 32, /*max_qa=*/4);
  EXPECT_THAT(Row(rows.tokens, 32, 2),
              ElementsAreArray(
                  Cat({{kCls}, Prefix(kQaIds[2], 4), {kSep}, kArticleIds, {kSep}, Ids(14, kPad)})));
  EXPECT_THAT(Row(rows.token_types, 32, 2),
              ElementsAreArray(Cat({Ids(6, 0), Ids(12, 1), Ids(14, 0)})));
  EXPECT_THAT(Row(rows.padding_mask, 32, 2), ElementsAreArray(Cat({Ids(18, 1), Ids(14, 0)})));
}

TEST_F(RaceLayoutTest, QaLongerThanTheSequenceIsCutToo) {
  // L = 6: [CLS] and 4 qa tokens, then the final [SEP] with type 1.
  RaceRows rows = Layout(CatArticle(), 6);
  EXPECT_THAT(Row(rows.tokens, 6, 3), ElementsAre(kCls, 2073, 2106, 1996, 4937, kSep));
  EXPECT_THAT(Row(rows.token_types, 6, 3), ElementsAre(0, 0, 0, 0, 0, 1));
  EXPECT_THAT(Row(rows.padding_mask, 6, 3), ElementsAre(1, 1, 1, 1, 1, 1));
  rows = Layout(CatArticle(), 2);
  EXPECT_THAT(Row(rows.tokens, 2, 0), ElementsAre(kCls, kSep));
  EXPECT_THAT(Row(rows.token_types, 2, 0), ElementsAre(0, 1));
}

TEST_F(RaceLayoutTest, BlanksAreFilledWithTheOption) {
  RaceArticle a = CatArticle();
  a.questions = {{"The cat sat on the _ .", {"mat", "x", "x", "x"}, 2},
                 {"_ sat on the _", {"x", "Tom", "x", "x"}, 3}};
  const int64_t L = 64;
  const RaceRows rows = Layout(a, L);
  EXPECT_THAT(rows.labels, ElementsAre(2, 3));
  ASSERT_EQ(rows.tokens.size(), 8u * L);
  // "The cat sat on the mat ." (no " . " to fix: nothing follows the dot).
  EXPECT_THAT(Prefix(Row(rows.tokens, L, 0), 9),
              ElementsAre(kCls, 1996, 4937, 2938, 2006, 1996, 13523, 1012, kSep));
  // Every "_" is replaced: "Tom sat on the Tom".
  EXPECT_THAT(Prefix(Row(rows.tokens, L, 5), 7),
              ElementsAre(kCls, 3419, 2938, 2006, 1996, 3419, kSep));
}

TEST_F(RaceLayoutTest, MaskedReadoutMasksTheOptionsPiecesAtEveryBlank) {
  constexpr int32_t kMask = 103, kU = -100;
  RaceArticle a = CatArticle();
  a.questions = {{"The cat sat on the _ .", {"mat", "on the mat", "cat", "sat"}, 1},
                 {"_ sat on the _", {"cat", "x", "x", "x"}, 0}};
  const int64_t L = 24;
  RaceRows rows;
  ASSERT_TRUE(AppendRaceArticle(Bert(), a, {L, 128, RaceReadout::kMasked}, &rows).ok());
  EXPECT_THAT(rows.labels, ElementsAre(1, 0));
  ASSERT_EQ(rows.mlm_labels.size(), 8u * L);
  EXPECT_THAT(Prefix(Row(rows.tokens, L, 0), 9),
              ElementsAre(kCls, 1996, 4937, 2938, 2006, 1996, kMask, 1012, kSep));
  EXPECT_THAT(Prefix(Row(rows.mlm_labels, L, 0), 9),
              ElementsAre(kU, kU, kU, kU, kU, kU, 13523, kU, kU));
  // A 3-piece option takes 3 [MASK]s; the article follows as in the pooled layout.
  EXPECT_THAT(
      Row(rows.tokens, L, 1),
      ElementsAreArray(Cat({{kCls, 1996, 4937, 2938, 2006, 1996, kMask, kMask, kMask, 1012, kSep},
                            kArticleIds,
                            {kSep, kPad}})));
  EXPECT_THAT(Row(rows.mlm_labels, L, 1),
              ElementsAreArray(Cat({{kU, kU, kU, kU, kU, kU, 2006, 1996, 13523}, Ids(L - 9, kU)})));
  EXPECT_THAT(Row(rows.token_types, L, 1), ElementsAreArray(Cat({Ids(11, 0), Ids(12, 1), {0}})));
  // Every blank is masked and scored.
  EXPECT_THAT(Prefix(Row(rows.tokens, L, 4), 7),
              ElementsAre(kCls, kMask, 2938, 2006, 1996, kMask, kSep));
  EXPECT_THAT(Prefix(Row(rows.mlm_labels, L, 4), 7), ElementsAre(kU, 4937, kU, kU, kU, 4937, kU));
  // The pooled readout writes no MLM labels.
  EXPECT_TRUE(Layout(a, L).mlm_labels.empty());
}

TEST_F(RaceLayoutTest, MaskedReadoutNeedsAKeptBlank) {
  RaceArticle a = CatArticle();  // "Where did the cat sit?": no blank.
  RaceRows rows;
  absl::Status s = AppendRaceArticle(Bert(), a, {24, 128, RaceReadout::kMasked}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("cat.txt: question 0 has no blank"));
  a.questions = {{"The cat sat on the _ .", {"mat", "on the mat", "cat", "sat"}, 1}};
  // qa cut after 5 tokens: "The cat sat on the" keeps no [MASK].
  s = AppendRaceArticle(Bert(), a, {24, 5, RaceReadout::kMasked}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("blank past the first 5 qa tokens"));
  // The 3-piece option keeps only 2 of its [MASK]s in rows of 9 tokens.
  s = AppendRaceArticle(Bert(), a, {9, 128, RaceReadout::kMasked}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rows.tokens.empty() && rows.mlm_labels.empty() && rows.labels.empty());
  a.questions[0].options[2] = " ";
  s = AppendRaceArticle(Bert(), a, {24, 128, RaceReadout::kMasked}, &rows);
  EXPECT_THAT(s.message(), HasSubstr("an option without tokens"));
  ASSERT_TRUE(ParseRaceReadout("masked").ok());
  EXPECT_EQ(*ParseRaceReadout("masked"), RaceReadout::kMasked);
  EXPECT_EQ(ParseRaceReadout("cls").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RaceLayoutTest, GroupRowsFollowTheFixture) {
  absl::StatusOr<RaceGroup> g = ReadRaceGroup(TestDataPath("RACE"), "dev", RaceLevel::kMiddle);
  ASSERT_TRUE(g.ok()) << g.status();
  absl::StatusOr<RaceRows> rows = LayoutRaceGroup(Bert(), *g, {/*seq_length=*/24});
  ASSERT_TRUE(rows.ok()) << rows.status();
  EXPECT_THAT(rows->labels, ElementsAre(0, 2, 1, 3, 2));
  ASSERT_EQ(rows->tokens.size(), 5u * 4 * 24);
  // Row 5 (question 2 "Ben got home _ .", option B): "ben got home alone ." then the first 16
  // article tokens (24 - 7 - 1) and [SEP].
  const Ids row = Row(rows->tokens, 24, 5);
  EXPECT_THAT(Prefix(row, 7),
              ElementsAreArray(Cat({{kCls}, Bert().Encode("ben got home alone ."), {kSep}})));
  const Ids article = Bert().Encode(CleanRaceText(g->articles[0].article));
  ASSERT_GT(article.size(), 16u);
  EXPECT_THAT(Ids(row.begin() + 7, row.end() - 1), ElementsAreArray(Prefix(article, 16)));
  EXPECT_EQ(row.back(), kSep);
}

TEST_F(RaceLayoutTest, BadArgumentsAreInvalidArgument) {
  RaceRows rows;
  absl::Status s = AppendRaceArticle(data::testing::Gpt2(), CatArticle(), {}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("tokenizer 'gpt2' has no [CLS]"));
  EXPECT_EQ(AppendRaceArticle(Bert(), CatArticle(), {1, 128}, &rows).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AppendRaceArticle(Bert(), CatArticle(), {16, 0}, &rows).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(rows.tokens.empty());
  ASSERT_TRUE(AppendRaceArticle(Bert(), CatArticle(), {16, 128}, &rows).ok());
  s = AppendRaceArticle(Bert(), CatArticle(), {32, 128}, &rows);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("rows of seq_length 16 cannot take rows of 32"));
  EXPECT_EQ(rows.tokens.size(), 4u * 16);
  EXPECT_EQ(rows.num_questions(), 1);
}

// ---- scoring -----------------------------------------------------------------------------------

TEST(CountCorrectTest, ArgmaxWithFirstOnTies) {
  const std::vector<float> scores = {0.1f, 0.9f, 0.3f, 0.2f,   // argmax 1
                                     1.0f, 1.0f, 0.0f, 0.0f,   // tie: 0
                                     -3.f, -2.f, -1.f, -4.f,   // argmax 2
                                     5.0f, 5.0f, 5.0f, 5.0f};  // tie: 0
  EXPECT_EQ(CountCorrect(scores, std::vector<int32_t>{1, 1, 2, 0}), 3);
  EXPECT_EQ(CountCorrect(scores, std::vector<int32_t>{0, 0, 0, 3}), 1);
  EXPECT_EQ(CountCorrect({}, {}), 0);
  EXPECT_DEATH(CountCorrect(scores, std::vector<int32_t>{1, 1, 2}), "");
}

TEST(ScoreSplitsTest, GroupsSplitsAndWeightedOverall) {
  const std::vector<RaceTally> tallies = {{"dev", RaceLevel::kMiddle, 10, 7},
                                          {"dev", RaceLevel::kHigh, 30, 15},
                                          {"test", RaceLevel::kMiddle, 20, 18},
                                          {"test", RaceLevel::kHigh, 40, 30}};
  absl::StatusOr<RaceScores> s = ScoreSplits(tallies);
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->groups.size(), 4u);
  EXPECT_EQ(s->groups[1].name, "dev/high");
  EXPECT_EQ(s->groups[1].questions, 30);
  EXPECT_EQ(s->groups[1].correct, 15);
  EXPECT_DOUBLE_EQ(s->groups[1].accuracy, 0.5);
  ASSERT_EQ(s->splits.size(), 2u);
  EXPECT_EQ(s->splits[0].name, "dev");
  EXPECT_EQ(s->splits[0].questions, 40);
  EXPECT_DOUBLE_EQ(s->splits[0].accuracy, 22.0 / 40);
  EXPECT_EQ(s->splits[1].name, "test");
  EXPECT_DOUBLE_EQ(s->splits[1].accuracy, 48.0 / 60);
  // Weighted by questions: 70 / 100, not the mean of the four accuracies (0.7125).
  EXPECT_EQ(s->overall.questions, 100);
  EXPECT_EQ(s->overall.correct, 70);
  EXPECT_DOUBLE_EQ(s->overall.accuracy, 0.7);
  EXPECT_EQ(RaceScoresJson(*s),
            "{\"dev/middle\":{\"questions\":10,\"correct\":7,\"accuracy\":0.7},"
            "\"dev/high\":{\"questions\":30,\"correct\":15,\"accuracy\":0.5},"
            "\"test/middle\":{\"questions\":20,\"correct\":18,\"accuracy\":0.9},"
            "\"test/high\":{\"questions\":40,\"correct\":30,\"accuracy\":0.75},"
            "\"dev\":{\"questions\":40,\"correct\":22,\"accuracy\":0.55},"
            "\"test\":{\"questions\":60,\"correct\":48,\"accuracy\":0.8},"
            "\"overall\":{\"questions\":100,\"correct\":70,\"accuracy\":0.7}}");
}

TEST(ScoreSplitsTest, BadTalliesAreInvalidArgument) {
  EXPECT_EQ(ScoreSplits({}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::vector<RaceTally>> bad = {
      {{"dev", RaceLevel::kMiddle, 0, 0}},
      {{"dev", RaceLevel::kMiddle, 5, 6}},
      {{"dev", RaceLevel::kMiddle, 5, -1}},
      {{"dev", RaceLevel::kHigh, 5, 1}, {"dev", RaceLevel::kHigh, 3, 1}}};
  for (const std::vector<RaceTally>& t : bad) {
    EXPECT_EQ(ScoreSplits(t).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_THAT(ScoreSplits(bad[3]).status().message(), HasSubstr("dev/high appears twice"));
  EXPECT_THAT(ScoreSplits(bad[1]).status().message(), HasSubstr("dev/middle has 6 correct of 5"));
}

}  // namespace
}  // namespace eval
}  // namespace mt
