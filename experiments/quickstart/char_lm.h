// A byte-level MLP language model built only from core ops: the quickstart's end-to-end demo of
// the op layer until the tensor-parallel transformer (nn/, models/) and the trainer (train/) land.
//
//   x      = concat_k Embedding(byte[t-K+k])   [B, K*C]
//   h      = GeLU(x W1 + b1)                   [B, H]
//   n      = LayerNorm(h; gamma, beta)         [B, H]
//   logits = n W2 + b2                         [B, 256]
//   loss   = mean_b CrossEntropy(logits[b], byte[t])
//
// Parameters, gradients, Adam moments and activations are allocated once at Create() for batches of
// up to config.batch rows; nothing allocates inside a step. Not thread-safe.
#ifndef MT_EXPERIMENTS_QUICKSTART_CHAR_LM_H_
#define MT_EXPERIMENTS_QUICKSTART_CHAR_LM_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/exec_context.h"
#include "core/tensor.h"

namespace mt {
namespace quickstart {

struct CharLmConfig {
  int context = 16;     // K: bytes of context.
  int embed = 24;       // C: embedding width per byte.
  int hidden = 384;     // H: hidden width.
  int batch = 128;      // Largest batch (rows) per call.
  float lr = 2e-3f;
  float weight_decay = 0.0f;
  uint64_t seed = 1234;

  // InvalidArgument naming the field for non-positive sizes or a non-positive learning rate.
  absl::Status Validate() const;
};

struct Parameter {
  std::string name;
  Tensor value;  // f32
  Tensor grad;   // f32, same shape
  Tensor adam_m;
  Tensor adam_v;
};

class CharLm {
 public:
  static constexpr int kVocab = 256;

  static absl::StatusOr<std::unique_ptr<CharLm>> Create(const CharLmConfig& config);

  // contexts: i32 [B, K] bytes; targets: i32 [B] bytes; B <= config.batch.
  // Returns the mean cross-entropy in nats. With compute_grad, overwrites every parameter's grad
  // with d(mean loss)/d(parameter).
  absl::StatusOr<double> ForwardBackward(const ExecContext& ctx, const TensorView& contexts,
                                         const TensorView& targets, bool compute_grad);

  // One AdamW step on every parameter from its current grad (step counts from 1).
  absl::Status AdamStep(const ExecContext& ctx, int64_t step);

  // Probabilities of the next byte after `context` (exactly K bytes).
  absl::StatusOr<std::vector<double>> NextByteProbs(const ExecContext& ctx,
                                                    const std::vector<int32_t>& context);

  std::vector<Parameter>& parameters() { return params_; }
  int64_t NumParameters() const;
  const CharLmConfig& config() const { return config_; }

 private:
  explicit CharLm(const CharLmConfig& config) : config_(config) {}
  absl::Status Forward(const ExecContext& ctx, const TensorView& contexts, int64_t rows);

  CharLmConfig config_;
  std::vector<Parameter> params_;  // embed, w1, b1, gamma, beta, w2, b2 (in this order).
  // Activations for up to config_.batch rows.
  Tensor x_;        // [B, K*C]
  Tensor pre_;      // [B, H]  x W1 + b1
  Tensor h_;        // [B, H]  GeLU
  Tensor n_;        // [B, H]  LayerNorm
  Tensor mean_;     // [B]
  Tensor rstd_;     // [B]
  Tensor logits_;   // [B, 256]
  Tensor losses_;   // [B]
  Tensor dlosses_;  // [B]
  Tensor dn_;       // [B, H]
  Tensor dh_;       // [B, H]
  Tensor dx_;       // [B, K*C]
};

}  // namespace quickstart
}  // namespace mt

#endif  // MT_EXPERIMENTS_QUICKSTART_CHAR_LM_H_
