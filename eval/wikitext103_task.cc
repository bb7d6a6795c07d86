#include "eval/wikitext103_task.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "core/status.h"
#include "eval/text_file.h"

namespace mt {
namespace eval {

absl::Status WikiText103Config::Validate() const {
  RETURN_IF_ERROR(harness.Validate());
  if (data.empty()) {
    return absl::InvalidArgumentError(
        "--data is required (the WikiText-103 test file, wiki.test.tokens)");
  }
  if (seq_length < 0 || overlapping_eval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--seq_length must be >= 0 (0: the model's positions) and --overlapping_eval >= 1 (got ",
        seq_length, " and ", overlapping_eval, ")"));
  }
  return absl::OkStatus();
}

absl::Status WikiText103Task::Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) {
  ASSIGN_OR_RETURN(tokenizer_, LoadGpt2Tokenizer(config_.harness));
  RETURN_IF_ERROR(CheckLanguageModel("wikitext103", checkpoint, *tokenizer_));
  const int64_t positions = checkpoint.config.max_position_embeddings;
  const int64_t L = config_.seq_length > 0 ? config_.seq_length : positions;
  if (L > positions || config_.overlapping_eval > L) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq_length=", L, " must be at most the model's max_position_embeddings ",
                     positions, " and at least --overlapping_eval=", config_.overlapping_eval));
  }
  ASSIGN_OR_RETURN(const std::string raw, ReadTextFile(config_.data));
  original_tokens_ = CountOriginalTokens(raw);
  tokens_ = tokenizer_->Encode(DetokenizeWikiText(raw));
  if (original_tokens_ < 2 || tokens_.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(config_.data, " holds ", original_tokens_, " original and ", tokens_.size(),
                     " BPE tokens; a perplexity needs at least 2 of each"));
  }
  ASSIGN_OR_RETURN(
      SlidingWindows windows,
      SlidingWindows::Create(static_cast<int64_t>(tokens_.size()), L, config_.overlapping_eval));
  windows_ = windows;
  model_name_ = checkpoint.model_name;
  if (rank0 && !config_.harness.per_example_jsonl.empty()) {
    ASSIGN_OR_RETURN(per_example_, JsonlWriter::Open(config_.harness.per_example_jsonl));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> WikiText103Task::ScoreWindows(int64_t first, int64_t n,
                                                                  LogitScorer& scorer) {
  const SlidingWindows& w = *windows_;
  const int64_t L = w.seq_length();
  Tensor inputs = Tensor::Host({n, L}, DType::kI32);   // [n, L]
  Tensor targets = Tensor::Host({n, L}, DType::kI32);  // [n, L]
  std::vector<uint8_t> scored(L);
  std::vector<RowSpan> spans;
  for (int64_t b = 0; b < n; ++b) {
    w.Fill(tokens_, first + b, tokenizer_->eod_id(),
           absl::MakeSpan(inputs.data_as<int32_t>() + b * L, L),
           absl::MakeSpan(targets.data_as<int32_t>() + b * L, L), absl::MakeSpan(scored));
    spans.push_back({b, w.scored_begin(first + b), w.scored_end(first + b)});
  }
  ASSIGN_OR_RETURN(const std::vector<TokenScore> scores,
                   scorer.Score(inputs.view(), targets.view(), spans));
  std::vector<double> sums;
  if (scores.empty()) return sums;  // Not rank 0.
  size_t k = 0;
  for (const RowSpan& s : spans) {
    double sum = 0;
    for (int64_t j = s.begin; j < s.end; ++j) sum += scores[k++].nll;
    sums.push_back(sum);
  }
  return sums;
}

absl::StatusOr<Json> WikiText103Task::Run(Harness& harness) {
  const SlidingWindows& w = *windows_;
  const int64_t W = w.num_windows(), B = config_.harness.micro_batch_size;
  const bool rank0 = harness.rank0();
  if (rank0) {
    std::printf(
        "wikitext103: %lld original tokens, %lld BPE tokens, %lld windows of %lld inputs "
        "every %lld tokens\n",
        static_cast<long long>(original_tokens_), static_cast<long long>(tokens_.size()),
        static_cast<long long>(W), static_cast<long long>(w.seq_length()),
        static_cast<long long>(w.stride()));
  }
  LogitScorer scorer(&harness);
  ProgressMeter progress("wikitext103", "windows", W, config_.harness.progress_interval, rank0);
  double total_nll = 0;  // S
  int64_t scored = 0;
  for (int64_t first = 0; first < W; first += B) {
    const int64_t n = std::min(B, W - first);
    ASSIGN_OR_RETURN(const std::vector<double> sums, ScoreWindows(first, n, scorer));
    for (size_t k = 0; k < sums.size(); ++k) {
      const int64_t window = first + static_cast<int64_t>(k);
      const int64_t count = w.scored_end(window) - w.scored_begin(window);
      total_nll += sums[k];
      scored += count;
      if (per_example_ != nullptr) {
        RETURN_IF_ERROR(per_example_->Write({{"window", window},
                                             {"start", w.start(window)},
                                             {"scored_targets", count},
                                             {"nll_sum", sums[k]}}));
      }
    }
    progress.Update(first + n, scored);
  }
  if (!rank0) return Json::object();
  if (per_example_ != nullptr) RETURN_IF_ERROR(per_example_->Close());
  if (scored != w.num_targets()) {
    return absl::InternalError(
        absl::StrCat("wikitext103: scored ", scored, " targets of ", w.num_targets()));
  }
  ASSIGN_OR_RETURN(const WikiTextResult r,
                   WikiTextPerplexity(total_nll, w.num_tokens(), original_tokens_));
  const double seconds = progress.elapsed_s();
  std::printf(
      "wikitext103: scored %lld targets in %.1f s (%.0f targets/s, %.0f input tokens/s; "
      "%s)\n",
      static_cast<long long>(scored), seconds, scored / seconds,
      static_cast<double>(W * w.seq_length()) / seconds, scorer.TimeSplit().c_str());
  return Json{{"task", "wikitext103"},
              {"original_tokens", original_tokens_},
              {"tokenized_tokens", w.num_tokens()},
              {"scored_targets", scored},
              {"loss", r.loss},
              {"ppl", r.ppl},
              {"adjusted_ppl", r.adjusted_ppl},
              {"seq_length", w.seq_length()},
              {"overlapping_eval", w.stride()},
              {"model", model_name_}};
}

}  // namespace eval
}  // namespace mt
