// What the GPT-family tasks (WikiText-103, LAMBADA) share on top of the harness: the GPT-2
// tokenizer, the check that a checkpoint holds a language model over that vocabulary, and
// scoring chosen positions of a micro-batch from the model's full logits (Model::Logits) on the
// host, over the real vocabulary only (eval/scoring.h).
#ifndef MT_EVAL_LM_SCORING_H_
#define MT_EVAL_LM_SCORING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "checkpoint/model_loading.h"
#include "core/alloc.h"
#include "core/tensor.h"
#include "data/tokenizers/tokenizer.h"
#include "eval/harness.h"
#include "eval/scoring.h"

namespace mt {
namespace eval {

// GPT-2 BPE from config.vocab_file (encoder.json) and config.merge_file (vocab.bpe) when given,
// else the installed one. NotFound naming a missing file (or how to install the assets);
// DataLoss naming a malformed one.
absl::StatusOr<std::unique_ptr<data::Tokenizer>> LoadGpt2Tokenizer(const HarnessConfig& config);

// OK when `checkpoint` holds a GPT-family model whose real vocabulary is the tokenizer's.
// FailedPrecondition naming both otherwise: another family ("wikitext103 scores GPT-family
// language models; checkpoint DIR holds a bert-family model (architecture 'bert')"), or another
// vocabulary size.
absl::Status CheckLanguageModel(absl::string_view task,
                                const checkpoint::CheckpointModel& checkpoint,
                                const data::Tokenizer& tokenizer);

// Positions [begin, end) of row `row` of a micro-batch, whose targets are scored.
struct RowSpan {
  int64_t row = 0;
  int64_t begin = 0;
  int64_t end = 0;
};

// Runs the model's Logits over micro-batches and scores positions of them. One per task run;
// keeps its logits buffer across calls of the same shape.
class LogitScorer {
 public:
  explicit LogitScorer(Harness* harness) : harness_(harness) {}

  // tokens, targets: contiguous host i32 [B, L] (targets: the next token of each input). Returns
  // on rank 0 one TokenScore per position of each span, spans in order, and nothing on the other
  // ranks. Collective over the TP group (every rank calls it with the same tokens). Errors: the
  // model's (e.g. a sequence longer than its positions), allocation and copies.
  absl::StatusOr<std::vector<TokenScore>> Score(const TensorView& tokens, const TensorView& targets,
                                                const std::vector<RowSpan>& spans);

  // Seconds spent so far in the model's forward passes (with the logits' all-gather) and, on
  // rank 0, in downloading and scoring the chosen positions, as "forward passes 4.1 s, host
  // scoring 2.9 s".
  std::string TimeSplit() const;

 private:
  Harness* harness_;
  double forward_s_ = 0, scoring_s_ = 0;
  Tensor logits_;  // [B * L, padded_vocab] f32 on the model's device.
  HostStaging staging_;
};

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_LM_SCORING_H_
