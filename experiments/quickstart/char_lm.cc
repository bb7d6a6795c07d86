#include "experiments/quickstart/char_lm.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "core/ops/adam.h"
#include "core/ops/cross_entropy.h"
#include "core/ops/elementwise.h"
#include "core/ops/embedding.h"
#include "core/ops/gemm.h"
#include "core/ops/layernorm.h"
#include "core/ops/reduce.h"
#include "core/status.h"

namespace mt {
namespace quickstart {

namespace {
constexpr float kLayerNormEps = 1e-5f;

Parameter MakeParameter(std::string name, Shape shape) {
  Parameter p;
  p.name = std::move(name);
  p.value = Tensor::Zeros(shape, DType::kF32);
  p.grad = Tensor::Zeros(shape, DType::kF32);
  p.adam_m = Tensor::Zeros(shape, DType::kF32);
  p.adam_v = Tensor::Zeros(std::move(shape), DType::kF32);
  return p;
}

void InitNormal(const Tensor& t, double stddev, std::mt19937_64& rng) {
  std::normal_distribution<double> dist(0.0, stddev);
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(dist(rng));
}

void InitConstant(const Tensor& t, float v) {
  float* p = t.data_as<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = v;
}
}  // namespace

absl::Status CharLmConfig::Validate() const {
  auto positive = [](const char* name, double v) -> absl::Status {
    if (!(v > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(name, " must be positive, got ", v));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(positive("context", context));
  RETURN_IF_ERROR(positive("embed", embed));
  RETURN_IF_ERROR(positive("hidden", hidden));
  RETURN_IF_ERROR(positive("batch", batch));
  RETURN_IF_ERROR(positive("lr", lr));
  if (weight_decay < 0) return absl::InvalidArgumentError("weight_decay must be >= 0");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CharLm>> CharLm::Create(const CharLmConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  std::unique_ptr<CharLm> m(new CharLm(config));
  const int64_t K = config.context, C = config.embed, H = config.hidden, B = config.batch;
  m->params_.push_back(MakeParameter("embed", {kVocab, C}));
  m->params_.push_back(MakeParameter("w1", {K * C, H}));
  m->params_.push_back(MakeParameter("b1", {H}));
  m->params_.push_back(MakeParameter("ln_gamma", {H}));
  m->params_.push_back(MakeParameter("ln_beta", {H}));
  m->params_.push_back(MakeParameter("w2", {H, kVocab}));
  m->params_.push_back(MakeParameter("b2", {kVocab}));
  std::mt19937_64 rng(config.seed);
  InitNormal(m->params_[0].value, 1.0, rng);
  InitNormal(m->params_[1].value, 1.0 / std::sqrt(static_cast<double>(K * C)), rng);
  InitConstant(m->params_[3].value, 1.0f);
  InitNormal(m->params_[5].value, 0.02, rng);

  m->x_ = Tensor::Zeros({B, K * C}, DType::kF32);
  m->pre_ = Tensor::Zeros({B, H}, DType::kF32);
  m->h_ = Tensor::Zeros({B, H}, DType::kF32);
  m->n_ = Tensor::Zeros({B, H}, DType::kF32);
  m->mean_ = Tensor::Zeros({B}, DType::kF32);
  m->rstd_ = Tensor::Zeros({B}, DType::kF32);
  m->logits_ = Tensor::Zeros({B, kVocab}, DType::kF32);
  m->losses_ = Tensor::Zeros({B}, DType::kF32);
  m->dlosses_ = Tensor::Zeros({B}, DType::kF32);
  m->dn_ = Tensor::Zeros({B, H}, DType::kF32);
  m->dh_ = Tensor::Zeros({B, H}, DType::kF32);
  m->dx_ = Tensor::Zeros({B, K * C}, DType::kF32);
  return m;
}

int64_t CharLm::NumParameters() const {
  int64_t n = 0;
  for (const Parameter& p : params_) n += p.value.numel();
  return n;
}

absl::Status CharLm::Forward(const ExecContext& ctx, const TensorView& contexts, int64_t rows) {
  const int64_t K = config_.context, C = config_.embed;
  // The embedding of [rows, K] ids is [rows * K, C], which is exactly [rows, K * C] row-major.
  const TensorView x = x_.view().Slice(0, rows);
  ASSIGN_OR_RETURN(TensorView x_flat, x.Reshape({rows * K, C}));
  RETURN_IF_ERROR(ops::Embedding(ctx, contexts, params_[0].value.view(), x_flat));
  const TensorView pre = pre_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Gemm(ctx, x, params_[1].value.view(), pre));
  RETURN_IF_ERROR(ops::BiasAdd(ctx, pre, params_[2].value.view(), pre));
  const TensorView h = h_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Gelu(ctx, pre, h));
  const TensorView n = n_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::LayerNorm(ctx, h, params_[3].value.view(), params_[4].value.view(),
                                 kLayerNormEps, n, mean_.view().Slice(0, rows),
                                 rstd_.view().Slice(0, rows)));
  const TensorView logits = logits_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Gemm(ctx, n, params_[5].value.view(), logits));
  RETURN_IF_ERROR(ops::BiasAdd(ctx, logits, params_[6].value.view(), logits));
  return absl::OkStatus();
}

absl::StatusOr<double> CharLm::ForwardBackward(const ExecContext& ctx,
                                               const TensorView& contexts,
                                               const TensorView& targets, bool compute_grad) {
  const int64_t rows = contexts.rank() == 2 ? contexts.dim(0) : -1;
  if (rows < 1 || rows > config_.batch || contexts.dim(1) != config_.context ||
      targets.numel() != rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CharLm: contexts ", contexts.DebugString(), " and targets ", targets.DebugString(),
        " must be [B, ", config_.context, "] and [B] with 1 <= B <= ", config_.batch));
  }
  RETURN_IF_ERROR(Forward(ctx, contexts, rows));
  const TensorView logits = logits_.view().Slice(0, rows);
  const TensorView losses = losses_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::CrossEntropy(ctx, logits, targets, losses));
  ASSIGN_OR_RETURN(double total, ops::Sum(ctx, losses));
  const double loss = total / static_cast<double>(rows);
  if (!compute_grad) return loss;

  const int64_t K = config_.context, C = config_.embed;
  const TensorView dlosses = dlosses_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Fill(ctx, dlosses, 1.0 / static_cast<double>(rows)));
  // dlogits overwrites logits (the forward's logits are no longer needed).
  RETURN_IF_ERROR(ops::CrossEntropyBackward(ctx, logits, targets, dlosses, logits));
  const TensorView dlogits = logits;
  const TensorView n = n_.view().Slice(0, rows);
  // w2: [H, V]; dW2 = n^T dlogits; db2 = colsum(dlogits); dn = dlogits W2^T.
  RETURN_IF_ERROR(ops::Gemm(ctx, n, dlogits, params_[5].grad.view(),
                            {/*transpose_a=*/ops::Transpose::kYes, ops::Transpose::kNo}));
  RETURN_IF_ERROR(ops::BiasGrad(ctx, dlogits, params_[6].grad.view()));
  const TensorView dn = dn_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Gemm(ctx, dlogits, params_[5].value.view(), dn,
                            {ops::Transpose::kNo, /*transpose_b=*/ops::Transpose::kYes}));
  const TensorView h = h_.view().Slice(0, rows);
  const TensorView dh = dh_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::LayerNormBackward(ctx, h, params_[3].value.view(),
                                         mean_.view().Slice(0, rows), rstd_.view().Slice(0, rows),
                                         dn, dh, params_[3].grad.view(), params_[4].grad.view()));
  const TensorView pre = pre_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::GeluBackward(ctx, pre, dh, dh));  // dh becomes d(pre).
  const TensorView x = x_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Gemm(ctx, x, dh, params_[1].grad.view(),
                            {/*transpose_a=*/ops::Transpose::kYes, ops::Transpose::kNo}));
  RETURN_IF_ERROR(ops::BiasGrad(ctx, dh, params_[2].grad.view()));
  const TensorView dx = dx_.view().Slice(0, rows);
  RETURN_IF_ERROR(ops::Gemm(ctx, dh, params_[1].value.view(), dx,
                            {ops::Transpose::kNo, /*transpose_b=*/ops::Transpose::kYes}));
  RETURN_IF_ERROR(ops::Fill(ctx, params_[0].grad.view(), 0.0));
  ASSIGN_OR_RETURN(TensorView dx_flat, dx.Reshape({rows * K, C}));
  RETURN_IF_ERROR(ops::EmbeddingBackward(ctx, contexts, dx_flat, params_[0].grad.view()));
  return loss;
}

absl::Status CharLm::AdamStep(const ExecContext& ctx, int64_t step) {
  for (Parameter& p : params_) {
    ops::AdamArgs args;
    args.lr = config_.lr;
    args.step = step;
    // No decay on biases, LayerNorm parameters and embeddings (the usual GPT recipe).
    const bool decay = p.name == "w1" || p.name == "w2";
    args.weight_decay = decay ? config_.weight_decay : 0.0f;
    RETURN_IF_ERROR(ops::AdamUpdate(ctx, p.value.view(), p.grad.view(), p.adam_m.view(),
                                    p.adam_v.view(), args));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> CharLm::NextByteProbs(const ExecContext& ctx,
                                                          const std::vector<int32_t>& context) {
  if (static_cast<int>(context.size()) != config_.context) {
    return absl::InvalidArgumentError(absl::StrCat("NextByteProbs: need ", config_.context,
                                                   " bytes of context, got ", context.size()));
  }
  Tensor ids = Tensor::Host({1, config_.context}, DType::kI32);
  for (int k = 0; k < config_.context; ++k) ids.data_as<int32_t>()[k] = context[k];
  RETURN_IF_ERROR(Forward(ctx, ids.view(), 1));
  const float* logits = logits_.data_as<float>();
  double mx = logits[0];
  for (int v = 1; v < kVocab; ++v) mx = std::max<double>(mx, logits[v]);
  std::vector<double> probs(kVocab);
  double z = 0;
  for (int v = 0; v < kVocab; ++v) z += probs[v] = std::exp(logits[v] - mx);
  for (double& p : probs) p /= z;
  return probs;
}

}  // namespace quickstart
}  // namespace mt
