// RACE, the data side of Megatron-LM's multiple-choice protocol: read the official directory
// layout, lay every question out as 4 BERT sequences, and score predictions per split and level.
//
//   ASSIGN_OR_RETURN(std::vector<RaceGroup> groups, ReadRace("RACE", {"dev", "test"}));
//   for (const RaceGroup& g : groups) {
//     ASSIGN_OR_RETURN(RaceRows rows, LayoutRaceGroup(*bert, g, {/*seq_length=*/512}));
//     // model: rows.tokens/token_types/padding_mask [Q * 4, L] -> scores [Q, 4]
//     tallies.push_back(
//         {g.split, g.level, rows.num_questions(), CountCorrect(scores, rows.labels)});
//   }
//   ASSIGN_OR_RETURN(RaceScores s, ScoreSplits(tallies));  // RaceScoresJson(s) to print
//
// No shared state: every function is thread-safe (so are the tokenizer's const methods).
#ifndef MT_EVAL_RACE_H_
#define MT_EVAL_RACE_H_

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "data/tokenizers/tokenizer.h"

namespace mt {
namespace eval {

inline constexpr int kRaceChoices = 4;

enum class RaceLevel { kMiddle, kHigh };

// "middle" or "high": the directory name.
absl::string_view RaceLevelName(RaceLevel level);

struct RaceQuestion {
  std::string question;
  std::array<std::string, kRaceChoices> options;
  int32_t label = 0;  // The right option: 0..3 for "A".."D".
};

// One file: an article and its questions.
struct RaceArticle {
  std::string path;  // The file it was read from.
  std::string article;
  std::vector<RaceQuestion> questions;
};

// The articles of one split and level, e.g. RACE/dev/middle, in bytewise order of file name.
struct RaceGroup {
  std::string split;  // "train", "dev" or "test"
  RaceLevel level = RaceLevel::kMiddle;
  std::vector<RaceArticle> articles;

  std::string name() const;  // "dev/middle"
  int64_t num_questions() const;
};

// One RACE file: a JSON object with "article" (string), "questions" ([n] strings), "options"
// ([n][4] strings) and "answers" ([n] strings, each "A", "B", "C" or "D"); other keys (the
// official "id") are ignored; n may be 0. Errors name the file and the key:
//   NotFound (or another errno-derived code) if the file cannot be read;
//   InvalidArgument for malformed JSON, a missing key, a value of the wrong type
//   ("'options'[2][1] is not a string"), a question without exactly 4 options, an answer outside
//   A-D, or "questions", "options" and "answers" of different lengths.
absl::StatusOr<RaceArticle> ReadRaceFile(const std::string& path);

// Every *.txt file of root/split/level. NotFound naming the directory if root/split or
// root/split/level is missing or holds no *.txt file; InvalidArgument for a split other than
// train, dev or test; ReadRaceFile's errors.
absl::StatusOr<RaceGroup> ReadRaceGroup(const std::string& root, absl::string_view split,
                                        RaceLevel level);

// ReadRaceGroup for each split in order, middle then high: 2 * splits.size() groups.
absl::StatusOr<std::vector<RaceGroup>> ReadRace(const std::string& root,
                                                absl::Span<const std::string> splits);

// Megatron's clean_text, plus a final strip: "\n" -> " ", every run of (Python) whitespace -> one
// space, then " . " -> ". " three times over (so "a . . b" -> "a.. b"), then strip. Under BERT
// WordPiece, which splits punctuation off words, the dot rule and the strip change no token.
std::string CleanRaceText(absl::string_view text);

// How a model reads its answer off the rows: the pooled [CLS] through a choice head (Megatron's
// RACE), or the masked-LM head at the question's blank (the option's word pieces masked in qa,
// scored by their mean log-probability; cloze questions only).
enum class RaceReadout { kPooled, kMasked };

struct RaceLayoutOptions {
  int64_t seq_length = 512;     // L: every sequence is padded or cut to this many tokens, >= 2.
  int64_t max_qa_length = 128;  // qa tokens kept, >= 1.
  RaceReadout readout = RaceReadout::kPooled;
};

// "pooled" or "masked" (the --readout flag's values), InvalidArgument otherwise.
absl::StatusOr<RaceReadout> ParseRaceReadout(absl::string_view name);

// The model inputs of some questions, 4 rows a question (option A..D), L tokens a row.
// Row layout (Megatron's): qa = question with every "_" replaced by the option if the question
// holds a "_", else question + " " + option; qa and article are CleanRaceText'ed and tokenized;
// qa is cut to max_qa_length tokens. ids = [CLS] qa [SEP] article, token types 0 for [CLS] qa
// [SEP] and 1 for the article; if ids has L or more tokens it is cut to L - 1 (the cut can reach
// into qa when qa is long); then one [SEP] of type 1 is appended; then [PAD] up to L, with token
// type 0 and padding mask 0 (the mask is 1 on every other position).
// The masked readout writes qa as the question with every "_" replaced by as many [MASK] tokens
// as the option has word pieces (the question's other text tokenized around them), and
// mlm_labels holds those pieces at the [MASK] positions; the rest of the row is as above.
struct RaceRows {
  int64_t seq_length = 0;
  std::vector<int32_t> tokens;        // [Q * 4, L]
  std::vector<int32_t> token_types;   // [Q * 4, L] in {0, 1}
  std::vector<int32_t> padding_mask;  // [Q * 4, L] in {0, 1}
  std::vector<int32_t> labels;        // [Q] in 0..3
  std::vector<int32_t> mlm_labels;    // [Q * 4, L] masked readout (else empty), -100 unscored

  int64_t num_questions() const { return static_cast<int64_t>(labels.size()); }
};

// InvalidArgument naming the file and the first question of `article` without a blank "_" (the
// masked readout answers cloze questions only); OK when every question has one.
absl::Status CheckRaceBlanks(const RaceArticle& article);

// Appends the rows of every question of `article` to *rows (whose seq_length must be 0, for an
// empty RaceRows, or options.seq_length). InvalidArgument if the tokenizer lacks [CLS], [SEP] or
// [PAD] (RACE needs BERT's), if seq_length < 2 or max_qa_length < 1, or if rows->seq_length
// differs; for the masked readout also (naming the file and question) without [MASK], for a
// question without "_", an option without word pieces, or a blank cut off by max_qa_length or
// seq_length. *rows is unchanged on error.
absl::Status AppendRaceArticle(const data::Tokenizer& tokenizer, const RaceArticle& article,
                               const RaceLayoutOptions& options, RaceRows* rows);

// The rows of every question of a group, in order; AppendRaceArticle's errors.
absl::StatusOr<RaceRows> LayoutRaceGroup(const data::Tokenizer& tokenizer, const RaceGroup& group,
                                         const RaceLayoutOptions& options);

// The questions whose highest score (the first, on ties) is at the label.
// scores: [Q, 4], labels: [Q]. CHECK-fails unless scores.size() == 4 * labels.size().
int64_t CountCorrect(absl::Span<const float> scores, absl::Span<const int32_t> labels);

// What a harness counted for one split and level.
struct RaceTally {
  std::string split;
  RaceLevel level = RaceLevel::kMiddle;
  int64_t questions = 0;
  int64_t correct = 0;
};

struct RaceScore {
  std::string name;  // "dev/middle", "dev" (a split's levels together) or "overall"
  int64_t questions = 0;
  int64_t correct = 0;
  double accuracy = 0;  // correct / questions
};

struct RaceScores {
  std::vector<RaceScore> groups;  // One per tally, in the tallies' order.
  std::vector<RaceScore> splits;  // One per split, in order of first appearance: both levels.
  RaceScore overall;              // Every tally: the questions-weighted accuracy.
};

// InvalidArgument if there are no tallies, a tally has no questions, correct is outside
// [0, questions], or a split and level appears twice.
absl::StatusOr<RaceScores> ScoreSplits(absl::Span<const RaceTally> tallies);

// {"dev/middle": {"questions": n, "correct": c, "accuracy": a}, ..., "dev": {...}, ...,
//  "overall": {...}}: the groups, then the splits, then overall.
std::string RaceScoresJson(const RaceScores& scores);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_RACE_H_
