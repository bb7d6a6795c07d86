#include "eval/lambada_task.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace eval {

namespace {

// The sequence length of an example laid out as inputs (context + target, less the last token).
int64_t InputLength(const LambadaExample& e) {
  return static_cast<int64_t>(e.context.size() + e.target.size()) - 1;
}

}  // namespace

absl::Status LambadaConfig::Validate() const {
  RETURN_IF_ERROR(harness.Validate());
  if (data.empty()) {
    return absl::InvalidArgumentError(
        "--data is required (the LAMBADA test set, lambada_test.jsonl)");
  }
  return absl::OkStatus();
}

absl::Status LambadaTask::Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) {
  ASSIGN_OR_RETURN(tokenizer_, LoadGpt2Tokenizer(config_.harness));
  RETURN_IF_ERROR(CheckLanguageModel("lambada", checkpoint, *tokenizer_));
  ASSIGN_OR_RETURN(examples_,
                   LoadLambada(config_.data, *tokenizer_,
                               config_.strict ? LambadaMode::kStrict : LambadaMode::kLastToken));
  const int64_t positions = checkpoint.config.max_position_embeddings;
  for (size_t i = 0; i < examples_.size(); ++i) {
    if (InputLength(examples_[i]) > positions) {
      return absl::InvalidArgumentError(absl::StrCat(
          config_.data, ":", i + 1, ": the example needs ", InputLength(examples_[i]),
          " positions (context ", examples_[i].context.size(), " + target ",
          examples_[i].target.size(), " tokens, less one); the model has ", positions));
    }
  }
  model_name_ = checkpoint.model_name;
  if (rank0 && !config_.harness.per_example_jsonl.empty()) {
    ASSIGN_OR_RETURN(per_example_, JsonlWriter::Open(config_.harness.per_example_jsonl));
  }
  return absl::OkStatus();
}

absl::Status LambadaTask::ScoreExamples(int64_t first, int64_t n, LogitScorer& scorer,
                                        int64_t* correct, int64_t* target_tokens) {
  int64_t L = 1;
  for (int64_t b = 0; b < n; ++b) L = std::max(L, InputLength(examples_[first + b]));
  Tensor inputs = Tensor::Host({n, L}, DType::kI32);   // [n, L]
  Tensor targets = Tensor::Host({n, L}, DType::kI32);  // [n, L]
  std::vector<RowSpan> spans;
  for (int64_t b = 0; b < n; ++b) {
    const LambadaExample& e = examples_[first + b];
    ASSIGN_OR_RETURN(const LambadaSequence seq, LayoutLambada(e, L, tokenizer_->eod_id()));
    std::memcpy(inputs.data_as<int32_t>() + b * L, seq.inputs.data(), L * sizeof(int32_t));
    std::memcpy(targets.data_as<int32_t>() + b * L, seq.targets.data(), L * sizeof(int32_t));
    const int64_t begin = static_cast<int64_t>(e.context.size()) - 1;
    spans.push_back({b, begin, begin + static_cast<int64_t>(e.target.size())});
  }
  ASSIGN_OR_RETURN(const std::vector<TokenScore> scores,
                   scorer.Score(inputs.view(), targets.view(), spans));
  if (scores.empty()) return absl::OkStatus();  // Not rank 0.
  const TokenScore* s = scores.data();
  for (int64_t b = 0; b < n; ++b) {
    const LambadaExample& e = examples_[first + b];
    std::vector<int32_t> predicted;
    double nll = 0;
    for (size_t k = 0; k < e.target.size(); ++k, ++s) {
      predicted.push_back(s->argmax);
      nll += s->nll;
    }
    const bool right = predicted == e.target;
    *correct += right;
    *target_tokens += static_cast<int64_t>(e.target.size());
    if (per_example_ != nullptr) {
      RETURN_IF_ERROR(per_example_->Write({{"example", first + b},
                                           {"correct", right},
                                           {"target", e.target},
                                           {"predicted", predicted},
                                           {"target_nll", nll}}));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Json> LambadaTask::Run(Harness& harness) {
  const int64_t N = static_cast<int64_t>(examples_.size());
  const int64_t B = config_.harness.micro_batch_size;
  const bool rank0 = harness.rank0();
  if (rank0) {
    std::printf("lambada: %lld examples (%s targets)\n", static_cast<long long>(N),
                config_.strict ? "strict: whole last word" : "last token");
  }
  LogitScorer scorer(&harness);
  ProgressMeter progress("lambada", "examples", N, config_.harness.progress_interval, rank0);
  int64_t correct = 0, target_tokens = 0;
  for (int64_t first = 0; first < N; first += B) {
    const int64_t n = std::min(B, N - first);
    RETURN_IF_ERROR(ScoreExamples(first, n, scorer, &correct, &target_tokens));
    progress.Update(first + n, target_tokens);
  }
  if (!rank0) return Json::object();
  if (per_example_ != nullptr) RETURN_IF_ERROR(per_example_->Close());
  const double seconds = progress.elapsed_s();
  std::printf(
      "lambada: scored %lld examples (%lld target tokens) in %.1f s (%.1f examples/s; "
      "%s)\n",
      static_cast<long long>(N), static_cast<long long>(target_tokens), seconds, N / seconds,
      scorer.TimeSplit().c_str());
  return Json{{"task", "lambada"},
              {"strict", config_.strict},
              {"examples", N},
              {"correct", correct},
              {"accuracy", static_cast<double>(correct) / static_cast<double>(N)},
              {"target_tokens", target_tokens},
              {"model", model_name_}};
}

}  // namespace eval
}  // namespace mt
