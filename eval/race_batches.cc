#include "eval/race_batches.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace eval {

std::vector<RaceQuestionRef> ListRaceQuestions(absl::Span<const RaceGroup> groups, int32_t group) {
  std::vector<RaceQuestionRef> refs;
  const std::vector<RaceArticle>& articles = groups[group].articles;
  for (size_t a = 0; a < articles.size(); ++a) {
    for (size_t q = 0; q < articles[a].questions.size(); ++q) {
      refs.push_back({group, static_cast<int32_t>(a), static_cast<int32_t>(q)});
    }
  }
  return refs;
}

std::vector<RaceQuestionRef> ListRaceQuestions(absl::Span<const RaceGroup> groups) {
  std::vector<RaceQuestionRef> refs;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::vector<RaceQuestionRef> some = ListRaceQuestions(groups, static_cast<int32_t>(g));
    refs.insert(refs.end(), some.begin(), some.end());
  }
  return refs;
}

std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(n);
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  // Not std::shuffle or std::uniform_int_distribution: their algorithms are the library's choice.
  std::mt19937_64 engine(seed + static_cast<uint64_t>(epoch));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(engine() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

absl::StatusOr<models::Batch> RaceBatcher::Layout(absl::Span<const RaceGroup> groups,
                                                  absl::Span<const RaceQuestionRef> questions) {
  if (questions.empty()) return absl::InvalidArgumentError("RACE batch: no questions");
  for (const RaceQuestionRef& r : questions) {
    if (r.group < 0 || r.group >= static_cast<int64_t>(groups.size()) || r.article < 0 ||
        r.article >= static_cast<int64_t>(groups[r.group].articles.size()) || r.question < 0 ||
        r.question >= static_cast<int64_t>(groups[r.group].articles[r.article].questions.size())) {
      return absl::InvalidArgumentError(absl::StrCat("RACE batch: no question (group ", r.group,
                                                     ", article ", r.article, ", question ",
                                                     r.question, ") in the groups given"));
    }
  }
  // Emptied, keeping the buffers' capacity.
  rows_.seq_length = 0;
  rows_.tokens.clear();
  rows_.token_types.clear();
  rows_.padding_mask.clear();
  rows_.labels.clear();
  rows_.mlm_labels.clear();
  for (size_t k = 0; k < questions.size();) {
    // The run of questions [k, end) of one article, tokenised together.
    const RaceArticle& source = groups[questions[k].group].articles[questions[k].article];
    RaceArticle run;
    run.path = source.path;
    run.article = source.article;
    size_t end = k;
    for (; end < questions.size() && questions[end].group == questions[k].group &&
           questions[end].article == questions[k].article;
         ++end) {
      run.questions.push_back(source.questions[questions[end].question]);
    }
    RETURN_IF_ERROR(AppendRaceArticle(*tokenizer_, run, options_, &rows_));
    k = end;
  }
  const int64_t Q = rows_.num_questions(), L = rows_.seq_length;
  const Shape shape = {Q * kRaceChoices, L};
  if (options_.readout == RaceReadout::kMasked) {
    return models::MaskedChoiceBatch(TensorView(rows_.tokens.data(), shape, DType::kI32),
                                     TensorView(rows_.token_types.data(), shape, DType::kI32),
                                     TensorView(rows_.padding_mask.data(), shape, DType::kI32),
                                     TensorView(rows_.mlm_labels.data(), shape, DType::kI32),
                                     TensorView(rows_.labels.data(), {Q}, DType::kI32));
  }
  return models::MultipleChoiceBatch(TensorView(rows_.tokens.data(), shape, DType::kI32),
                                     TensorView(rows_.token_types.data(), shape, DType::kI32),
                                     TensorView(rows_.padding_mask.data(), shape, DType::kI32),
                                     TensorView(rows_.labels.data(), {Q}, DType::kI32));
}

}  // namespace eval
}  // namespace mt
