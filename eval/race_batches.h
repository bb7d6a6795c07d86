// RACE questions as model inputs: references to the questions of read groups (eval/race.h), a
// shuffled order per epoch, and micro-batches laid out on demand (4 rows a question, as
// LayoutRaceGroup lays them out) so that a whole split is never held as token rows.
//
//   const std::vector<RaceQuestionRef> all = ListRaceQuestions(groups);
//   const std::vector<int64_t> order = ShuffledOrder(all.size(), seed, epoch);
//   RaceBatcher batcher(&tokenizer, {/*seq_length=*/512});
//   ASSIGN_OR_RETURN(models::Batch b, batcher.Layout(groups, some_refs));  // [Q * 4, L], [Q]
//   multiple_choice->MultipleChoice(sc, b, ...);  // models::MultipleChoiceOf(model)
//
// Thread-compatible (a RaceBatcher reuses its buffers); the free functions are thread-safe.
#ifndef MT_EVAL_RACE_BATCHES_H_
#define MT_EVAL_RACE_BATCHES_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/tokenizers/tokenizer.h"
#include "eval/race.h"
#include "models/model.h"

namespace mt {
namespace eval {

// Question `question` of article `article` of groups[group].
struct RaceQuestionRef {
  int32_t group = 0;
  int32_t article = 0;
  int32_t question = 0;
};

// Every question of `groups`, group by group, article by article, in order.
std::vector<RaceQuestionRef> ListRaceQuestions(absl::Span<const RaceGroup> groups);

// The questions of groups[group] alone, in order.
std::vector<RaceQuestionRef> ListRaceQuestions(absl::Span<const RaceGroup> groups, int32_t group);

// A permutation of [0, n) that depends only on (seed, epoch): Fisher-Yates over std::mt19937_64
// (whose output the C++ standard fixes) seeded with seed + epoch, j = draw mod (i + 1), so every
// platform and rank gets the same order.
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch);

// Lays out micro-batches of questions into buffers it keeps (grown as needed, never shrunk).
class RaceBatcher {
 public:
  // `tokenizer` must outlive the batcher.
  RaceBatcher(const data::Tokenizer* tokenizer, const RaceLayoutOptions& options)
      : tokenizer_(tokenizer), options_(options) {}

  // The rows of `questions` (references into `groups`), in order: question k's options are rows
  // 4k..4k+3, each row exactly as LayoutRaceGroup lays it out. Consecutive questions of one
  // article share one tokenisation of it. Returns host views (multiple-choice batch: tokens,
  // token_types, padding_mask i32 [Q * 4, L], labels i32 [Q]) valid until the next call.
  // InvalidArgument for no questions or a reference outside `groups`; AppendRaceArticle's errors.
  absl::StatusOr<models::Batch> Layout(absl::Span<const RaceGroup> groups,
                                       absl::Span<const RaceQuestionRef> questions);

  // The rows of the last Layout.
  const RaceRows& rows() const { return rows_; }

 private:
  const data::Tokenizer* tokenizer_;
  RaceLayoutOptions options_;
  RaceRows rows_;
};

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_RACE_BATCHES_H_
