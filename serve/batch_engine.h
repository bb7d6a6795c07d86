// Continuous batching (as vLLM, TGI and Megatron-Core's dynamic engine do it) on a model's slotted
// key/value cache (models::IncrementalDecoder::DecodeSlots): requests come and go between decode
// steps instead of running one at a time.
//
//   Add(id, prompts, config)  queues the request's prompts as sequences, behind every queued one;
//   Step()                    one pass of the model:
//     1. admission, oldest first: while a cache slot is free, the oldest waiting sequence takes
//        it if its prompt fits the step's token budget (max_batched_tokens, counting one token
//        per running sequence); the oldest one always gets in when a slot is free and no other
//        prompt was admitted in this step, so a long prompt is never starved, and no younger
//        sequence ever passes an older one (strict FIFO);
//     2. the step: every running sequence's newest token and every admitted prompt, in one
//        DecodeSlots call (each sequence attends to its own slot);
//     3. from each sequence's logits its next token is drawn (serve/sampling.h, keyed by the
//        prompt's index in its request and the position, as Generate does), and a sequence that
//        generated tokens_to_generate tokens, <|endoftext|>, or what its StopCondition stops
//        leaves the batch at once, freeing its slot;
//   TakeResult(id)            a finished request's Generations.
//   Cancel(id)                drops a request (waiting or running), freeing its slots.
//
// Same tokens as alone: a sequence's logits do not depend on the others in its step (the
// models' DecodeSlots guarantee; docs/generation.md says why for the CPU's GEMMs), and the draws
// are functions of (seed, prompt index, position), so a request gives the same tokens and
// log-probabilities batched as it does alone through Generate (one prompt per request; with
// several prompts of different lengths Generate forces the longer prompts' tails token by token,
// which rounds differently).
//
// Tensor parallelism: every rank runs its own engine with the same calls in the same order (the
// serve loop broadcasts them), and the engines stay in lockstep: admission depends only on the
// calls, and the logits are gathered, identical on every rank.
//
// Not thread-safe: one thread calls everything (the serve loop's).
#ifndef MT_SERVE_BATCH_ENGINE_H_
#define MT_SERVE_BATCH_ENGINE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "models/incremental_decoder.h"
#include "models/model.h"
#include "nn/context.h"
#include "serve/generate.h"

namespace mt {
namespace serve {

struct BatchLimits {
  int64_t max_batch_size = 16;  // Sequences in a step (cache slots), >= 1.
  // Tokens in a step (prompts admitted plus one per running sequence), >= 1; a longer prompt
  // runs in a step of its own (with the running sequences' tokens).
  int64_t max_batched_tokens = 2048;
};

// One token a step generated.
struct TokenEvent {
  int64_t request = 0;
  int64_t index = 0;  // The prompt's index in its request.
  int32_t token = 0;
  float logprob = 0;  // log p(token | before it) when the request asked for logprobs, else 0.
};

struct StepReport {
  std::vector<TokenEvent> tokens;  // In the order of the step's sequences.
  std::vector<int64_t> finished;   // Requests whose every sequence finished in this step.
  int64_t sequences = 0;           // Sequences the step ran (the batch size).
  int64_t rows = 0;                // Tokens it ran.
};

class BatchEngine {
 public:
  // Starts the model's slotted decoding: max_batch_size slots of max_position_embeddings
  // positions. InvalidArgument for limits < 1; Unimplemented for a model without slotted decoding
  // (no incremental decoder, or its blocks cannot decode); the model's errors.
  static absl::StatusOr<std::unique_ptr<BatchEngine>> Create(const nn::StepContext& sc,
                                                             models::Model& model,
                                                             const BatchLimits& limits);
  ~BatchEngine();
  BatchEngine(const BatchEngine&) = delete;
  BatchEngine& operator=(const BatchEngine&) = delete;

  // Queues request `id` (not already held). InvalidArgument as Generate's argument checks, or
  // for an id in use. `stop` must stay valid until the request finishes or is cancelled.
  absl::Status Add(int64_t id, const std::vector<std::vector<int32_t>>& prompts,
                   const GenerateConfig& config, StopCondition stop = nullptr);
  // Drops request `id` wherever it is (its slots are free for the next step); nothing for an
  // unknown id.
  void Cancel(int64_t id);
  // One step (above). Nothing to do: an empty report. The model's errors end decoding (the
  // engine is unusable after one).
  absl::StatusOr<StepReport> Step(const nn::StepContext& sc);
  // A finished request's generations (in prompt order), removed from the engine; empty for an
  // unknown or unfinished id.
  std::vector<Generation> TakeResult(int64_t id);

  bool idle() const { return running_.empty() && waiting_.empty(); }
  int64_t running() const { return static_cast<int64_t>(running_.size()); }
  int64_t waiting() const { return static_cast<int64_t>(waiting_.size()); }
  const BatchLimits& limits() const { return limits_; }

 private:
  struct Request {
    GenerateConfig config;
    StopCondition stop;
    std::vector<Generation> generations;
    int64_t unfinished = 0;
  };
  struct Sequence {
    int64_t request = 0, index = 0;
    int64_t slot = -1;
    bool prefilled = false;
  };

  BatchEngine(models::Model& model, models::IncrementalDecoder& decoder, const BatchLimits& limits)
      : model_(model), decoder_(decoder), limits_(limits) {}
  // Moves waiting sequences into free slots (step 1); returns how many.
  absl::StatusOr<int64_t> Admit();
  // The logits of running_[i] (its last position) and, for a prompt scored with logprobs, of its
  // every position: into `logits` [R or N, V_pad], R = running_.size().
  absl::Status RunModel(const nn::StepContext& sc, bool every);
  // Prompt log-probabilities of running_[i] from the every-position logits at `row`.
  void ScorePrompt(const Sequence& s, int64_t row);
  // Step 3 for running_[i] from its last-position logits `row`; true when it finished.
  absl::StatusOr<bool> Advance(const Sequence& s, const float* row, StepReport* report);
  void Free(const Sequence& s);

  models::Model& model_;
  models::IncrementalDecoder& decoder_;
  const BatchLimits limits_;
  std::map<int64_t, Request> requests_;
  std::deque<Sequence> waiting_;   // Oldest first.
  std::vector<Sequence> running_;  // Oldest first.
  std::vector<int64_t> free_slots_;
  std::vector<int64_t> done_;  // Requests finished (kept until TakeResult).
  Tensor logits_;              // f32 [R or N, V_pad]
};

}  // namespace serve
}  // namespace mt

#endif  // MT_SERVE_BATCH_ENGINE_H_
