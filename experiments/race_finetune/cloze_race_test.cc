#include "experiments/race_finetune/cloze_race.h"

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/status.h"
#include "data/tokenizers/wordpiece.h"
#include "eval/race.h"
#include "experiments/common/report.h"
#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

constexpr char kArticle[] =
    "And the King rose early in the morning, and went to the gate of the city. There he found "
    "his servants waiting with horses and chariots. \"Where is the prophet?\" asked the king; "
    "nobody answered him, for the prophet had gone down to the river before dawn.";

TEST(ClozeRaceTest, SentencesSplitAfterTheirEndingPunctuation) {
  EXPECT_EQ(Sentences("One two. \"Three?\" four; five"),
            (std::vector<std::string>{"One two.", "\"Three?\"", "four;", "five"}));
}

TEST(ClozeRaceTest, OnlyTheAnswerGivesBackASentenceOfTheArticle) {
  ClozeRaceConfig config;
  config.questions_per_article = 3;
  const std::vector<ClozeQuestion> qs = ClozeQuestions(kArticle, config, 7);
  ASSERT_EQ(qs.size(), 3u);
  const std::string article = kArticle;
  for (const ClozeQuestion& q : qs) {
    ASSERT_EQ(q.options.size(), 4u);
    ASSERT_NE(q.question.find('_'), std::string::npos) << q.question;
    for (int i = 0; i < 4; ++i) {
      const std::string filled = absl::StrReplaceAll(q.question, {{"_", q.options[i]}});
      EXPECT_EQ(article.find(filled) != std::string::npos, i == q.answer)
          << q.question << " with " << q.options[i];
      EXPECT_NE(article.find(q.options[i]), std::string::npos) << q.options[i];
      EXPECT_GE(q.options[i].size(), 4u);
      for (int j = 0; j < i; ++j) EXPECT_NE(q.options[i], q.options[j]);
    }
  }
  // Too few candidate words: no question.
  EXPECT_TRUE(ClozeQuestions("a b c d e f g. the cat sat on a mat.", config, 1).empty());
}

// A vocabulary that holds eight of the article's words whole and spells every other word made
// of `letters` (any other word is one [UNK]).
absl::StatusOr<std::unique_ptr<data::WordPiece>> SmallVocab(absl::string_view letters) {
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n";
  for (char c : letters) {
    const std::string letter(1, c);
    absl::StrAppend(&vocab, letter, "\n##", letter, "\n");
  }
  for (const char* w :
       {"king", "morning", "gate", "city", "servants", "horses", "prophet", "river"}) {
    absl::StrAppend(&vocab, w, "\n");
  }
  const std::string path = absl::StrCat(testing::TempDir(), "/cloze_vocab.txt");
  RETURN_IF_ERROR(WriteFile(path, vocab));
  return data::WordPiece::Load(path);
}

constexpr char kLetters[] = "abcdefghijklmnopqrstuvwxyz";

TEST(ClozeRaceTest, WithATokenizerEveryOptionIsOneTokenAndEveryQuestionFits) {
  auto vocab = SmallVocab(kLetters);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  ClozeRaceConfig config;
  config.questions_per_article = 3;
  config.tokenizer = vocab->get();
  config.max_question_tokens = 1000;
  std::vector<ClozeQuestion> qs = ClozeQuestions(kArticle, config, 7);
  // One from each sentence of 6 words or more (each holds a whole word of the vocabulary).
  ASSERT_EQ(qs.size(), 3u);
  for (const ClozeQuestion& q : qs) {
    for (const std::string& option : q.options) {
      EXPECT_EQ((*vocab)->Encode(option).size(), 1u) << option;
    }
  }
  // Only the shortest of them within the cap: one question, from it.
  const std::string servants = "There he found his servants waiting with horses and chariots.";
  config.max_question_tokens = static_cast<int>((*vocab)->Encode(servants).size());
  qs = ClozeQuestions(kArticle, config, 7);
  ASSERT_EQ(qs.size(), 1u);
  EXPECT_EQ(absl::StrReplaceAll(qs[0].question, {{"_", qs[0].options[qs[0].answer]}}), servants);
  EXPECT_TRUE(qs[0].options[qs[0].answer] == "servants" || qs[0].options[qs[0].answer] == "horses");
}

TEST(ClozeRaceTest, AWordTheVocabularyCannotSpellIsNoOption) {
  // Without "w", "went", "waiting", "with", "answered", "down" and "dawn" are each one [UNK].
  auto vocab = SmallVocab("abcdefghijklmnopqrstuvxyz");
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  ASSERT_EQ((*vocab)->Encode("waiting"), std::vector<int32_t>{1});
  ClozeRaceConfig config;
  config.questions_per_article = 3;
  config.tokenizer = vocab->get();
  config.max_question_tokens = 1000;
  const std::vector<ClozeQuestion> qs = ClozeQuestions(kArticle, config, 7);
  ASSERT_FALSE(qs.empty());
  for (const ClozeQuestion& q : qs) {
    for (const std::string& option : q.options) {
      EXPECT_EQ(option.find('w'), std::string::npos) << option;
    }
  }
}

TEST(ClozeRaceTest, WritesWhatTheRaceReaderReads) {
  std::vector<std::string> articles;
  for (int i = 0; i < 12; ++i) articles.push_back(kArticle);
  articles.push_back("too short to be an article.");
  const std::string dir = absl::StrCat(testing::TempDir(), "/cloze_race");
  ClozeRaceConfig config;
  auto stats = WriteClozeRace(articles, config, dir);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->articles, 12);
  // Articles 0, 5, 10 test; 1, 6, 11 dev; the other 6 train; 2 questions each.
  EXPECT_EQ(stats->questions[0], 12);
  EXPECT_EQ(stats->questions[1], 6);
  EXPECT_EQ(stats->questions[2], 6);
  auto groups = eval::ReadRace(dir, {"train", "dev", "test"});
  ASSERT_TRUE(groups.ok()) << groups.status();
  int64_t total = 0;
  for (const eval::RaceGroup& g : *groups) total += g.num_questions();
  EXPECT_EQ(total, 24);
  // Too few articles for every split and level.
  EXPECT_FALSE(WriteClozeRace({kArticle, kArticle}, config, dir).ok());
}

TEST(ClozeRaceTest, TrainingArticlesOfTheirOwnLeaveTheHeldOutOnesToDevAndTest) {
  const std::string dir = absl::StrCat(testing::TempDir(), "/cloze_race_own_train");
  ClozeRaceConfig config;
  config.dev_every = 3;
  config.max_train_questions = 5;
  const std::vector<std::string> heldout(6, kArticle), train(10, kArticle);
  auto stats = WriteClozeRace(heldout, config, dir, train);
  ASSERT_TRUE(stats.ok()) << stats.status();
  // Held-out articles 0 and 3 dev, the other 4 test; training articles until 5 questions are
  // reached (3 articles of 2), none held out.
  EXPECT_EQ(stats->questions[1], 4);
  EXPECT_EQ(stats->questions[2], 8);
  EXPECT_EQ(stats->questions[0], 6);
  EXPECT_EQ(stats->articles, 9);
  auto train_groups = eval::ReadRace(dir, {"train"});
  ASSERT_TRUE(train_groups.ok()) << train_groups.status();
  int64_t files = 0;
  for (const eval::RaceGroup& g : *train_groups) {
    files += static_cast<int64_t>(g.articles.size());
  }
  EXPECT_EQ(files, 3);
  // Two held-out articles cannot fill dev and test at both levels.
  EXPECT_FALSE(WriteClozeRace({kArticle, kArticle}, config, dir, train).ok());
}

}  // namespace
}  // namespace experiments
}  // namespace mt
