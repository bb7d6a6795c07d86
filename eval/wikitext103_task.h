// The WikiText-103 zero-shot perplexity task (Megatron-LM's protocol; eval/wikitext.h has the
// data side): the raw test file's original token count T_o; the detokenised text BPE-encoded as
// ONE string (T tokens, no EOD inserted); windows of seq_length inputs every overlapping_eval
// tokens, right-padded with EOD; window 0 scores all its targets, later ones their last
// overlapping_eval; every target 1..T-1 scored once. With S the summed NLL (float64, from the
// model's f32 logits over the real vocabulary):
//   loss = S / (T - 1), ppl = exp(min(20, loss)), adjusted_ppl = exp(min(20, S / (T_o - 1))).
//
// Results object: {"task": "wikitext103", "original_tokens": T_o, "tokenized_tokens": T,
// "scored_targets": T - 1, "loss", "ppl", "adjusted_ppl", "seq_length", "overlapping_eval",
// "model": the checkpoint's registered model name}. Per-example lines: {"window", "start",
// "scored_targets", "nll_sum"} (the window's first token index, its scored count and NLL sum).
#ifndef MT_EVAL_WIKITEXT103_TASK_H_
#define MT_EVAL_WIKITEXT103_TASK_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "data/tokenizers/tokenizer.h"
#include "eval/harness.h"
#include "eval/lm_scoring.h"
#include "eval/wikitext.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace eval {

struct WikiText103Config {
  HarnessConfig harness;
  std::string data;               // wiki.test.tokens
  int64_t seq_length = 0;         // 0: the model's max_position_embeddings.
  int64_t overlapping_eval = 32;  // Window stride: targets each later window scores.

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    HarnessConfig::Fields(self.harness, v);
    v("data", &self.data, "The WikiText-103 test file (wiki.test.tokens).");
    v("seq_length", &self.seq_length,
      "Inputs per window (0: the model's max_position_embeddings).");
    v("overlapping_eval", &self.overlapping_eval,
      "Window stride: each window after the first scores its last this many targets.");
  }

  // HarnessConfig::Validate, plus --data given, seq_length >= 0 and overlapping_eval >= 1
  // (InvalidArgument naming the flag).
  absl::Status Validate() const;
};

class WikiText103Task : public EvalTask {
 public:
  explicit WikiText103Task(const WikiText103Config& config) : config_(config) {}

  // InvalidArgument for a seq_length above the model's positions or below overlapping_eval, or a
  // file with fewer than 2 tokens (original or BPE; naming it); the errors of ReadTextFile,
  // LoadGpt2Tokenizer, CheckLanguageModel and JsonlWriter::Open.
  absl::Status Prepare(const checkpoint::CheckpointModel& checkpoint, bool rank0) override;
  absl::StatusOr<Json> Run(Harness& harness) override;

 private:
  // The NLL sums (rank 0; empty elsewhere) of windows [first, first + n), one forward pass.
  absl::StatusOr<std::vector<double>> ScoreWindows(int64_t first, int64_t n, LogitScorer& scorer);

  WikiText103Config config_;
  std::unique_ptr<data::Tokenizer> tokenizer_;
  int64_t original_tokens_ = 0;  // T_o
  std::vector<int32_t> tokens_;  // [T]
  std::optional<SlidingWindows> windows_;
  std::unique_ptr<JsonlWriter> per_example_;
  std::string model_name_;
};

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_WIKITEXT103_TASK_H_
