#include "eval/lm_scoring.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/status.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/factory.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "models/config.h"

namespace mt {
namespace eval {

absl::StatusOr<std::unique_ptr<data::Tokenizer>> LoadGpt2Tokenizer(const HarnessConfig& config) {
  if (config.vocab_file.empty()) return data::CreateTokenizer("gpt2");
  ASSIGN_OR_RETURN(const std::string classes, data::JsUnicodeClasses());
  ASSIGN_OR_RETURN(std::unique_ptr<data::Gpt2Bpe> bpe,
                   data::Gpt2Bpe::Load(config.vocab_file, config.merge_file, classes));
  return std::unique_ptr<data::Tokenizer>(std::move(bpe));
}

absl::Status CheckLanguageModel(absl::string_view task,
                                const checkpoint::CheckpointModel& checkpoint,
                                const data::Tokenizer& tokenizer) {
  const models::ModelConfig& c = checkpoint.config;
  if (c.family != models::Family::kGpt2) {
    return absl::FailedPreconditionError(
        absl::StrCat(task, " scores GPT-family language models; checkpoint ", checkpoint.dir,
                     " holds a ", models::FamilyArchitecture(c.family),
                     "-family model (architecture '", c.ArchitectureName(), "')"));
  }
  if (c.vocab_size != tokenizer.vocab_size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", checkpoint.dir, " has a vocabulary of ", c.vocab_size, " tokens but the ",
        tokenizer.name(), " tokenizer has ", tokenizer.vocab_size(),
        " (give the model's tokenizer with --vocab_file and --merge_file)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<TokenScore>> LogitScorer::Score(const TensorView& tokens,
                                                           const TensorView& targets,
                                                           const std::vector<RowSpan>& spans) {
  models::Model& model = harness_->model();
  const ExecContext& exec = harness_->exec();
  const int64_t B = tokens.dim(0), L = tokens.dim(1), V = model.padded_vocab();
  const Shape shape = {B * L, V};
  if (logits_.shape() != shape) {
    logits_ = Tensor();  // Free the old buffer first.
    ASSIGN_OR_RETURN(logits_, Alloc(exec, shape, DType::kF32));
  }
  const auto start = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(model.Logits(harness_->step_context(), tokens, logits_.view()));
  RETURN_IF_ERROR(SynchronizeDevice(exec));  // So that the forward pass is what is timed.
  const auto forward_done = std::chrono::steady_clock::now();
  forward_s_ += std::chrono::duration<double>(forward_done - start).count();
  std::vector<TokenScore> scores;
  if (!harness_->rank0()) return scores;
  for (const RowSpan& s : spans) {
    const size_t first = scores.size();
    scores.resize(first + (s.end - s.begin));
    ASSIGN_OR_RETURN(
        const TensorView rows,
        staging_.Download(exec, logits_.view().Slice(s.row * L + s.begin, s.row * L + s.end)));
    ScoreRows(rows.data_as<float>(), s.end - s.begin, V, model.config().vocab_size,
              targets.data_as<int32_t>() + s.row * L + s.begin, harness_->pool(),
              scores.data() + first);
  }
  scoring_s_ +=
      std::chrono::duration<double>(std::chrono::steady_clock::now() - forward_done).count();
  return scores;
}

std::string LogitScorer::TimeSplit() const {
  return absl::StrFormat("forward passes %.1f s, host scoring %.1f s", forward_s_, scoring_s_);
}

}  // namespace eval
}  // namespace mt
