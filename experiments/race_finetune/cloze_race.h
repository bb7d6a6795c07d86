// A RACE-format multiple-choice task generated from held-out documents, for when the official
// RACE release is not at hand: cloze questions whose answer is in the article. Each question is a
// sentence of the article with one word replaced by "_"; its four options are that word and three
// other words of the same article that the sentence does not contain, so the article's topic
// alone does not tell them apart, and only the right one gives back the article's sentence.
//
//   ClozeRaceStats s = WriteClozeRace(articles, ClozeRaceConfig(), "/tmp/cloze_race");
//   // /tmp/cloze_race/{train,dev,test}/{middle,high}/<n>.txt, read by eval/race.h
#ifndef MT_EXPERIMENTS_RACE_FINETUNE_CLOZE_RACE_H_
#define MT_EXPERIMENTS_RACE_FINETUNE_CLOZE_RACE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"

namespace mt {
namespace experiments {

struct ClozeQuestion {
  std::string question;              // The sentence with "_" for the blanked word.
  std::vector<std::string> options;  // 4 words.
  int answer = 0;                    // Index of the blanked word in options.
};

struct ClozeRaceConfig {
  int min_article_words = 30, max_article_words = 90;  // Articles outside are skipped.
  int questions_per_article = 2;
  int min_word_length = 4;  // Blanked words and distractors: ASCII letters only, this long.
  // Without training articles of their own (WriteClozeRace's `train_articles` empty), article i
  // is test if i % test_every == 0, dev if i % dev_every == 1, else train. With them, held-out
  // article i is dev if i % dev_every == 0, else test.
  int dev_every = 5, test_every = 5;
  int64_t max_train_questions = 0;  // With training articles: stop after this many (0: all).
  uint64_t seed = 1234;
  // When set (not owned): blanked words and distractors only among the words `tokenizer` encodes
  // as one token other than [UNK], so that a masked-LM readout scores each option by one logit at
  // one [MASK], and questions only from sentences of at most `max_question_tokens` tokens, so that
  // a question fits ahead of its article (where a small vocabulary spells rare words out letter by
  // letter).
  const data::Tokenizer* tokenizer = nullptr;
  int max_question_tokens = 64;
};

// The sentences of `text`: split after ".", "!", "?", ";" or ":" (with the closing quotes and
// brackets that follow) at a space.
std::vector<std::string> Sentences(absl::string_view text);

// Up to `config.questions_per_article` questions from one article (each from a different
// sentence of at least 6 words, and within config.max_question_tokens with a tokenizer), chosen
// with `seed`; none when the article has fewer than 4 distinct candidate words.
std::vector<ClozeQuestion> ClozeQuestions(absl::string_view article, const ClozeRaceConfig& config,
                                          uint64_t seed);

struct ClozeRaceStats {
  int64_t articles = 0;
  int64_t questions[3] = {0, 0, 0};  // train, dev, test.
};

// Writes the questions of `articles` in RACE's layout under `dir` (removed first): one file per
// article with questions, levels middle and high alternating by article within a split. The
// train split comes from `train_articles` when it is not empty (e.g. documents a model was
// pretrained on, so that every held-out article is dev or test), else from `articles`.
// FailedPrecondition when a split of a level would be empty (too few articles); Internal naming
// a file not written.
absl::StatusOr<ClozeRaceStats> WriteClozeRace(const std::vector<std::string>& articles,
                                              const ClozeRaceConfig& config, const std::string& dir,
                                              const std::vector<std::string>& train_articles = {});

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_RACE_FINETUNE_CLOZE_RACE_H_
