#include "core/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/fast_math.h"
#include "core/ops/reduce_simd.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

// Shapes, dtypes and layout shared by the forward and the backward. `per_row` is losses (forward)
// or dlosses (backward).
absl::Status CheckArgs(absl::string_view op, const TensorView& logits, const TensorView& targets,
                       const TensorView& per_row, absl::string_view per_row_name) {
  RETURN_IF_ERROR(CheckSameDevice(op, {&logits, &targets, &per_row}));
  RETURN_IF_ERROR(CheckDType(op, "logits", logits, {DType::kF32, DType::kBF16, DType::kF16}));
  RETURN_IF_ERROR(CheckDType(op, "targets", targets, {DType::kI32, DType::kI64}));
  RETURN_IF_ERROR(CheckDType(op, per_row_name, per_row, {DType::kF32}));
  RETURN_IF_ERROR(CheckRank(op, "logits", logits, 2));
  const int64_t N = logits.shape[0];
  RETURN_IF_ERROR(CheckShape(op, "targets", targets, {N}));
  RETURN_IF_ERROR(CheckShape(op, per_row_name, per_row, {N}));
  RETURN_IF_ERROR(CheckContiguous(op, "logits", logits));
  RETURN_IF_ERROR(CheckContiguous(op, "targets", targets));
  return CheckContiguous(op, per_row_name, per_row);
}

absl::Status TargetOutOfRange(absl::string_view op, int64_t n, int64_t t, int64_t V) {
  return absl::OutOfRangeError(absl::StrCat(op, ": targets[", n, "] = ", t,
                                            " is outside the vocabulary [0, ", V,
                                            ") and is not kIgnoreIndex (", kIgnoreIndex, ")"));
}

template <typename I>
absl::Status CheckTargetsT(absl::string_view op, const I* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = static_cast<int64_t>(targets[n]);
    if (t == kIgnoreIndex) continue;
    if (t < 0 || t >= V) return TargetOutOfRange(op, n, t, V);
  }
  return absl::OkStatus();
}

// CheckTargets for targets in device memory: a device-side search, then the same error.
absl::Status CheckTargetsCuda(absl::string_view op, const ExecContext& ctx,
                              const TensorView& targets, int64_t V) {
  ASSIGN_OR_RETURN(const cuda::BadId bad, cuda::FindBadId(op, ctx, "targets", targets, 0, V,
                                                          /*allow_ignore=*/true));
  if (bad.position >= 0) return TargetOutOfRange(op, bad.position, bad.value, V);
  return absl::OkStatus();
}

// Every target in [0, V) or kIgnoreIndex, checked on the targets' device.
absl::Status CheckTargets(absl::string_view op, const ExecContext& ctx, const TensorView& targets,
                          int64_t V) {
  MT_ROUTE_DEVICE(op, targets, CheckTargetsCuda(op, ctx, targets, V));
  const int64_t N = targets.numel();
  return targets.dtype == DType::kI32 ? CheckTargetsT(op, targets.data_as<int32_t>(), N, V)
                                      : CheckTargetsT(op, targets.data_as<int64_t>(), N, V);
}

// Rows per ParallelFor chunk: about 16K logits of work each.
int64_t RowGrain(int64_t V) {
  return std::max<int64_t>(1, (int64_t{1} << 14) / std::max<int64_t>(1, V));
}

// A row of logits in f32: the row itself, or its values widened into *buf.
template <typename T>
const float* RowF32(const T* x, int64_t V, std::vector<float>* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    buf->resize(V);
    internal::ToF32(x, V, buf->data());
    return buf->data();
  }
}

struct RowStats {
  float max;
  double sum_exp;  // sum_j exp(x_j - max)
};

// The row's maximum and sum of exponentials in SIMD: each exponential in f32 (fast_math.h,
// within 3e-7 of exp) into *terms, their sum in f64 lanes (reduce_simd.h), as the header states
// and the CUDA kernel does. The bits do not depend on the SIMD target.
RowStats Stats(const float* x, int64_t V, std::vector<float>* terms) {
  const float mx = internal::MaxF32(x, V);
  terms->resize(V);
  internal::ExpTerms(x, 1.0f, mx, V, terms->data());
  return {mx, internal::SumF32(terms->data(), V)};
}

template <typename T, typename I>
void CrossEntropyCpu(ThreadPool* pool, const T* logits, const I* targets, float* losses, int64_t N,
                     int64_t V) {
  ParallelFor(pool, N, RowGrain(V), [&](int64_t begin, int64_t end) {
    std::vector<float> buf, terms;
    for (int64_t n = begin; n < end; ++n) {
      const int64_t t = static_cast<int64_t>(targets[n]);
      if (t == kIgnoreIndex) {
        losses[n] = 0.0f;
        continue;
      }
      const float* x = RowF32(logits + n * V, V, &buf);
      const RowStats st = Stats(x, V, &terms);
      // (max - x_t) is exact in f64, so the loss keeps its relative accuracy when it is small.
      losses[n] = static_cast<float>(std::log(st.sum_exp) + (static_cast<double>(st.max) - x[t]));
    }
  });
}

template <typename T, typename I>
void CrossEntropyBackwardCpu(ThreadPool* pool, const T* logits, const I* targets,
                             const float* dlosses, T* dlogits, int64_t N, int64_t V) {
  ParallelFor(pool, N, RowGrain(V), [&](int64_t begin, int64_t end) {
    std::vector<float> buf, terms;
    for (int64_t n = begin; n < end; ++n) {
      const int64_t t = static_cast<int64_t>(targets[n]);
      T* dx = dlogits + n * V;  // May be the logits' row: each is read before it is written.
      if (t == kIgnoreIndex) {
        for (int64_t j = 0; j < V; ++j) dx[j] = FromFloat<T>(0.0f);
        continue;
      }
      const float* x = RowF32(logits + n * V, V, &buf);
      const RowStats st = Stats(x, V, &terms);
      const float dl = dlosses[n];
      const float scale = static_cast<float>(1.0 / st.sum_exp) * dl;
      // softmax * dloss in f32, then the target's - dloss; f32 rows in place.
      if constexpr (std::is_same_v<T, float>) {
        internal::ScaledExpTerms(x, 1.0f, st.max, scale, V, dx);
        dx[t] -= dl;
      } else {
        internal::ScaledExpTerms(x, 1.0f, st.max, scale, V, buf.data());
        buf[t] -= dl;
        internal::FromF32(buf.data(), V, dx);
      }
    }
  });
}

template <typename T>
void ForwardForIds(ThreadPool* pool, const TensorView& logits, const TensorView& targets,
                   const TensorView& losses) {
  const int64_t N = logits.shape[0], V = logits.shape[1];
  if (targets.dtype == DType::kI32) {
    CrossEntropyCpu(pool, logits.data_as<T>(), targets.data_as<int32_t>(), losses.data_as<float>(),
                    N, V);
  } else {
    CrossEntropyCpu(pool, logits.data_as<T>(), targets.data_as<int64_t>(), losses.data_as<float>(),
                    N, V);
  }
}

template <typename T>
void BackwardForIds(ThreadPool* pool, const TensorView& logits, const TensorView& targets,
                    const TensorView& dlosses, const TensorView& dlogits) {
  const int64_t N = logits.shape[0], V = logits.shape[1];
  if (targets.dtype == DType::kI32) {
    CrossEntropyBackwardCpu(pool, logits.data_as<T>(), targets.data_as<int32_t>(),
                            dlosses.data_as<float>(), dlogits.data_as<T>(), N, V);
  } else {
    CrossEntropyBackwardCpu(pool, logits.data_as<T>(), targets.data_as<int64_t>(),
                            dlosses.data_as<float>(), dlogits.data_as<T>(), N, V);
  }
}

}  // namespace

absl::Status CrossEntropy(const ExecContext& ctx, const TensorView& logits,
                          const TensorView& targets, const TensorView& losses) {
  constexpr absl::string_view kOp = "CrossEntropy";
  RETURN_IF_ERROR(CheckArgs(kOp, logits, targets, losses, "losses"));
  RETURN_IF_ERROR(CheckTargets(kOp, ctx, targets, logits.shape[1]));
  MT_ROUTE_DEVICE(kOp, logits, cuda::CrossEntropy(ctx, logits, targets, losses));
  switch (logits.dtype) {
    case DType::kF32:
      ForwardForIds<float>(ctx.pool, logits, targets, losses);
      break;
    case DType::kBF16:
      ForwardForIds<bf16>(ctx.pool, logits, targets, losses);
      break;
    case DType::kF16:
      ForwardForIds<f16>(ctx.pool, logits, targets, losses);
      break;
    default:
      LOG(FATAL) << "unreachable: dtype checked above";
  }
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(const ExecContext& ctx, const TensorView& logits,
                                  const TensorView& targets, const TensorView& dlosses,
                                  const TensorView& dlogits) {
  constexpr absl::string_view kOp = "CrossEntropyBackward";
  RETURN_IF_ERROR(CheckArgs(kOp, logits, targets, dlosses, "dlosses"));
  RETURN_IF_ERROR(CheckSameDevice(kOp, {&logits, &dlogits}));
  if (dlogits.dtype != logits.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": dlogits has dtype ",
                                                   DTypeName(dlogits.dtype), ", but logits has ",
                                                   DTypeName(logits.dtype)));
  }
  RETURN_IF_ERROR(CheckShape(kOp, "dlogits", dlogits, logits.shape));
  RETURN_IF_ERROR(CheckContiguous(kOp, "dlogits", dlogits));
  RETURN_IF_ERROR(CheckTargets(kOp, ctx, targets, logits.shape[1]));
  MT_ROUTE_DEVICE(kOp, logits, cuda::CrossEntropyBackward(ctx, logits, targets, dlosses, dlogits));
  switch (logits.dtype) {
    case DType::kF32:
      BackwardForIds<float>(ctx.pool, logits, targets, dlosses, dlogits);
      break;
    case DType::kBF16:
      BackwardForIds<bf16>(ctx.pool, logits, targets, dlosses, dlogits);
      break;
    case DType::kF16:
      BackwardForIds<f16>(ctx.pool, logits, targets, dlosses, dlogits);
      break;
    default:
      LOG(FATAL) << "unreachable: dtype checked above";
  }
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
