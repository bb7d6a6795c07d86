#include "core/ops/reduce.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/reduce_simd.h"
#include "core/status.h"

namespace mt {
namespace ops {
namespace {

enum class Kind { kSum, kSumOfSquares, kMax };

// Elements per chunk. A constant, so that the partial results, and the order in which they are
// combined, do not depend on the pool.
constexpr int64_t kChunk = int64_t{1} << 14;
// Independent accumulators inside a chunk: shorter dependency chains (and SIMD) without making the
// result depend on anything but n.
constexpr int kLanes = 8;

template <Kind K>
double Term(float v) {
  const double d = v;
  return K == Kind::kSumOfSquares ? d * d : d;  // Exact: a 24-bit significand squared fits in 53.
}

template <typename T, Kind K>
double ReduceChunk(const T* x, int64_t n) {
  if constexpr (K == Kind::kMax) {
    double m = -std::numeric_limits<double>::infinity();
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      const float v = ToFloat(x[i]);
      nan |= std::isnan(v);
      m = std::max(m, static_cast<double>(v));  // Keeps m when v is NaN; `nan` remembers it.
    }
    return nan ? std::numeric_limits<double>::quiet_NaN() : m;
  } else if constexpr (std::is_same_v<T, float>) {
    return K == Kind::kSum ? internal::SumF32(x, n) : internal::SumOfSquaresF32(x, n);
  } else {
    // The layout of reduce_simd.h's f32 kernels.
    double acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes) {
      for (int k = 0; k < kLanes; ++k) acc[k] += Term<K>(ToFloat(x[i + k]));
    }
    for (int k = 0; i < n; ++i, ++k) acc[k] += Term<K>(ToFloat(x[i]));
    for (int width = kLanes / 2; width > 0; width /= 2) {
      for (int k = 0; k < width; ++k) acc[k] += acc[k + width];
    }
    return acc[0];
  }
}

template <typename T, Kind K>
double ReduceCpu(ThreadPool* pool, const T* x, int64_t n) {
  const int64_t num_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(num_chunks);
  ParallelFor(pool, num_chunks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      const int64_t first = c * kChunk;
      partial[c] = ReduceChunk<T, K>(x + first, std::min(kChunk, n - first));
    }
  });
  if constexpr (K == Kind::kMax) {
    double m = -std::numeric_limits<double>::infinity();
    for (double p : partial) {
      if (std::isnan(p)) return p;
      m = std::max(m, p);
    }
    return m;
  } else {
    double s = 0.0;
    for (double p : partial) s += p;
    return s;
  }
}

template <Kind K>
absl::StatusOr<double> Reduce(absl::string_view op, const ExecContext& ctx, const TensorView& x) {
  RETURN_IF_ERROR(CheckDType(op, "x", x, {DType::kF32, DType::kBF16, DType::kF16}));
  RETURN_IF_ERROR(CheckContiguous(op, "x", x));
  MT_ROUTE_DEVICE(op, x,
                  cuda::Reduce(op, ctx, x,
                               K == Kind::kSum   ? cuda::ReduceOp::kSum
                               : K == Kind::kMax ? cuda::ReduceOp::kMax
                                                 : cuda::ReduceOp::kSumOfSquares));
  const int64_t n = x.numel();
  switch (x.dtype) {
    case DType::kF32:
      return ReduceCpu<float, K>(ctx.pool, x.data_as<float>(), n);
    case DType::kBF16:
      return ReduceCpu<bf16, K>(ctx.pool, x.data_as<bf16>(), n);
    case DType::kF16:
      return ReduceCpu<f16, K>(ctx.pool, x.data_as<f16>(), n);
    default:
      LOG(FATAL) << "unreachable: dtype checked above";
  }
  return 0.0;
}

}  // namespace

absl::StatusOr<double> Sum(const ExecContext& ctx, const TensorView& x) {
  return Reduce<Kind::kSum>("Sum", ctx, x);
}

absl::StatusOr<double> Max(const ExecContext& ctx, const TensorView& x) {
  return Reduce<Kind::kMax>("Max", ctx, x);
}

absl::StatusOr<double> SumOfSquares(const ExecContext& ctx, const TensorView& x) {
  return Reduce<Kind::kSumOfSquares>("SumOfSquares", ctx, x);
}

absl::StatusOr<double> L2Norm(const ExecContext& ctx, const TensorView& x) {
  ASSIGN_OR_RETURN(const double s, Reduce<Kind::kSumOfSquares>("L2Norm", ctx, x));
  return std::sqrt(s);
}

}  // namespace ops
}  // namespace mt
