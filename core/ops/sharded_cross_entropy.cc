#include "core/ops/sharded_cross_entropy.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "core/ops/check.h"
#include "core/ops/cross_entropy.h"
#include "core/status.h"

namespace mt {
namespace ops {

namespace {

int64_t TargetAt(const TensorView& targets, int64_t n) {
  return targets.dtype == DType::kI32 ? targets.data_as<int32_t>()[n]
                                      : targets.data_as<int64_t>()[n];
}

absl::Status CheckLogits(absl::string_view op, const TensorView& logits, const VocabShard& shard) {
  RETURN_IF_ERROR(CheckContiguous(op, "logits", logits));
  RETURN_IF_ERROR(CheckRank(op, "logits", logits, 2));
  RETURN_IF_ERROR(CheckDType(op, "logits", logits, {DType::kF32}));
  if (!logits.device.is_cpu()) return UnsupportedDevice(op, logits.device);
  if (shard.vocab_start < 0 || shard.valid_vocab <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": bad vocab shard (start ",
                                                   shard.vocab_start, ", valid vocab ",
                                                   shard.valid_vocab, ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckVector(absl::string_view op, absl::string_view name, const TensorView& t,
                         int64_t n, std::initializer_list<DType> dtypes) {
  RETURN_IF_ERROR(CheckContiguous(op, name, t));
  RETURN_IF_ERROR(CheckDType(op, name, t, dtypes));
  RETURN_IF_ERROR(CheckShape(op, name, t, {n}));
  if (!t.device.is_cpu()) return UnsupportedDevice(op, t.device);
  return absl::OkStatus();
}

absl::Status CheckTargets(absl::string_view op, const TensorView& targets, int64_t n,
                          int64_t valid_vocab) {
  RETURN_IF_ERROR(CheckVector(op, "targets", targets, n, {DType::kI32, DType::kI64}));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = TargetAt(targets, i);
    if (t != kIgnoreIndex && (t < 0 || t >= valid_vocab)) {
      return absl::OutOfRangeError(absl::StrCat(op, ": target ", t, " at row ", i,
                                                " is outside the vocabulary [0, ", valid_vocab,
                                                ")"));
    }
  }
  return absl::OkStatus();
}

// Number of unmasked columns of this shard.
int64_t ValidColumns(const TensorView& logits, const VocabShard& shard) {
  const int64_t v = shard.valid_vocab - shard.vocab_start;
  return std::max<int64_t>(0, std::min<int64_t>(v, logits.dim(1)));
}

}  // namespace

absl::Status ShardedRowMax(const ExecContext& ctx, const TensorView& logits,
                           const VocabShard& shard, const TensorView& row_max) {
  constexpr absl::string_view kOp = "ShardedRowMax";
  RETURN_IF_ERROR(CheckLogits(kOp, logits, shard));
  const int64_t N = logits.dim(0), V = logits.dim(1), valid = ValidColumns(logits, shard);
  RETURN_IF_ERROR(CheckVector(kOp, "row_max", row_max, N, {DType::kF32}));
  const float* l = logits.data_as<float>();
  float* m = row_max.data_as<float>();
  ParallelFor(ctx.pool, N, 4, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      float mx = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, l[n * V + j]);
      m[n] = mx;
    }
  });
  return absl::OkStatus();
}

absl::Status ShardedTargetAndSumExp(const ExecContext& ctx, const TensorView& logits,
                                    const TensorView& targets, const VocabShard& shard,
                                    const TensorView& row_max, const TensorView& partials) {
  constexpr absl::string_view kOp = "ShardedTargetAndSumExp";
  RETURN_IF_ERROR(CheckLogits(kOp, logits, shard));
  const int64_t N = logits.dim(0), V = logits.dim(1), valid = ValidColumns(logits, shard);
  RETURN_IF_ERROR(CheckTargets(kOp, targets, N, shard.valid_vocab));
  RETURN_IF_ERROR(CheckVector(kOp, "row_max", row_max, N, {DType::kF32}));
  RETURN_IF_ERROR(CheckContiguous(kOp, "partials", partials));
  RETURN_IF_ERROR(CheckDType(kOp, "partials", partials, {DType::kF32}));
  RETURN_IF_ERROR(CheckShape(kOp, "partials", partials, {N, 2}));
  const float* l = logits.data_as<float>();
  const float* m = row_max.data_as<float>();
  float* p = partials.data_as<float>();
  ParallelFor(ctx.pool, N, 4, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t t = TargetAt(targets, n) - shard.vocab_start;
      p[2 * n] = (t >= 0 && t < valid) ? l[n * V + t] : 0.0f;
      double s = 0;
      for (int64_t j = 0; j < valid; ++j) s += std::exp(static_cast<double>(l[n * V + j] - m[n]));
      p[2 * n + 1] = static_cast<float>(s);
    }
  });
  return absl::OkStatus();
}

absl::Status ShardedLoss(const ExecContext& ctx, const TensorView& targets,
                         const TensorView& row_max, const TensorView& partials,
                         const TensorView& losses) {
  constexpr absl::string_view kOp = "ShardedLoss";
  const int64_t N = losses.numel();
  RETURN_IF_ERROR(CheckVector(kOp, "losses", losses, N, {DType::kF32}));
  RETURN_IF_ERROR(CheckVector(kOp, "targets", targets, N, {DType::kI32, DType::kI64}));
  RETURN_IF_ERROR(CheckVector(kOp, "row_max", row_max, N, {DType::kF32}));
  RETURN_IF_ERROR(CheckShape(kOp, "partials", partials, {N, 2}));
  const float* m = row_max.data_as<float>();
  const float* p = partials.data_as<float>();
  float* out = losses.data_as<float>();
  for (int64_t n = 0; n < N; ++n) {
    out[n] = TargetAt(targets, n) == kIgnoreIndex
                 ? 0.0f
                 : static_cast<float>(std::log(static_cast<double>(p[2 * n + 1])) + m[n] - p[2 * n]);
  }
  return absl::OkStatus();
}

absl::Status ShardedCrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                         const TensorView& targets, const VocabShard& shard,
                                         const TensorView& row_max, const TensorView& partials,
                                         const TensorView& dlosses, const TensorView& dlogits) {
  constexpr absl::string_view kOp = "ShardedCrossEntropyBackward";
  RETURN_IF_ERROR(CheckLogits(kOp, logits, shard));
  const int64_t N = logits.dim(0), V = logits.dim(1), valid = ValidColumns(logits, shard);
  RETURN_IF_ERROR(CheckTargets(kOp, targets, N, shard.valid_vocab));
  RETURN_IF_ERROR(CheckVector(kOp, "row_max", row_max, N, {DType::kF32}));
  RETURN_IF_ERROR(CheckVector(kOp, "dlosses", dlosses, N, {DType::kF32}));
  RETURN_IF_ERROR(CheckShape(kOp, "partials", partials, {N, 2}));
  RETURN_IF_ERROR(CheckContiguous(kOp, "dlogits", dlogits));
  RETURN_IF_ERROR(CheckDType(kOp, "dlogits", dlogits, {DType::kF32}));
  RETURN_IF_ERROR(CheckShape(kOp, "dlogits", dlogits, logits.shape));
  const float* l = logits.data_as<float>();
  const float* m = row_max.data_as<float>();
  const float* p = partials.data_as<float>();
  const float* dl = dlosses.data_as<float>();
  float* d = dlogits.data_as<float>();
  ParallelFor(ctx.pool, N, 4, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const int64_t target = TargetAt(targets, n);
      if (target == kIgnoreIndex) {
        for (int64_t j = 0; j < V; ++j) d[n * V + j] = 0.0f;
        continue;
      }
      const int64_t t = target - shard.vocab_start;
      const double inv = 1.0 / p[2 * n + 1];
      for (int64_t j = 0; j < V; ++j) {
        if (j >= valid) {
          d[n * V + j] = 0.0f;
          continue;
        }
        const double s = std::exp(static_cast<double>(l[n * V + j] - m[n])) * inv;
        d[n * V + j] = static_cast<float>((s - (j == t ? 1.0 : 0.0)) * dl[n]);
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
