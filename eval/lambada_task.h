// The LAMBADA zero-shot accuracy task (Megatron-LM's protocol; eval/lambada.h has the data side):
// each text split into a context and its target (strict: the whole last word, all of its BPE
// tokens; else the last token), one teacher-forced forward pass over context + target, and the
// argmax over the REAL vocabulary (padding columns excluded) at every target position; an
// example is correct only if every target token is predicted.
//
// Batching: examples are taken in file order, micro_batch_size at a time, each laid out as one
// row of the micro-batch's longest length and right-padded with EOD. Attention is causal and the
// scored positions precede the padding, so padding changes no result (lambada_batch_test checks
// batched against one-at-a-time runs).
//
// Results object: {"task": "lambada", "strict", "examples": N, "correct": C, "accuracy": C / N,
// "target_tokens": the number of target tokens, "model": the registered model name}.
// Per-example lines: {"example" (0-based, = line - 1), "correct", "target" (ids), "predicted"
// (the argmax at each target position), "target_nll" (the target's summed NLL)}.
#ifndef MT_EVAL_LAMBADA_TASK_H_
#define MT_EVAL_LAMBADA_TASK_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizers/tokenizer.h"
#include "eval/harness.h"
#include "eval/lambada.h"
#include "eval/lm_scoring.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace eval {

struct LambadaConfig {
  HarnessConfig harness;
  std::string data;    // lambada_test.jsonl
  bool strict = true;  // Whole last word (the paper's protocol); false: the last token.

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    HarnessConfig::Fields(self.harness, v);
    v("data", &self.data, "The LAMBADA test set: one JSON object {\"text\": ...} per line.");
    v("strict", &self.strict,
      "Predict the whole last word (all its tokens); false: only the last token.");
  }

  // HarnessConfig::Validate, plus --data given (InvalidArgument).
  absl::Status Validate() const;
};

class LambadaTask : public EvalTask {
 public:
  explicit LambadaTask(const LambadaConfig& config) : config_(config) {}

  // The errors of LoadLambada ("FILE:LINE: ..." for a bad line), LoadGpt2Tokenizer,
  // CheckLanguageModel and JsonlWriter::Open; InvalidArgument "FILE:LINE: ..." for an example
  // longer than the model's positions.
  absl::Status Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) override;
  absl::StatusOr<Json> Run(Harness& harness) override;

 private:
  // Counts one micro-batch, examples [first, first + n), into *correct and *target_tokens
  // (rank 0) and writes their per-example lines.
  absl::Status ScoreExamples(int64_t first, int64_t n, LogitScorer& scorer, int64_t* correct,
                             int64_t* target_tokens);

  LambadaConfig config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  std::vector<LambadaExample> examples_;
  std::unique_ptr<JsonlWriter> per_example_;
  std::string model_name_;
};

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_LAMBADA_TASK_H_
