#include "core/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/dropout_cuda.h"
#include "core/ops/dropout_factors.h"
#include "core/ops/elementwise_loops.h"
#include "core/ops/elementwise_simd.h"
#include "core/ops/gelu_simd.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace ops {
namespace {

using internal::DispatchFloat;
using internal::RunBinary;
using internal::RunUnary;

constexpr int64_t kGrain = internal::kElementwiseGrain;

// BiasGrad sums rows in fixed blocks (a function of the row count only, never of the thread
// count), each block sequentially, then the blocks in order: the result is bitwise the same for
// any pool, and the f32 error grows with rows / blocks + blocks rather than with rows.
constexpr int64_t kMaxRowBlocks = 128;
constexpr int64_t kMinRowsPerBlock = 16;
// Columns per BiasGrad task, so that a few rows of a very wide tensor still spread over threads.
constexpr int64_t kColumnChunk = 1024;

// ---- Kernels ----

// out[i] = x[i] + bias[(c0 + i) mod N] for i < n: f32 rows of N columns from column c0, a row
// segment at a time. out may be x.
void AddBiasRange(const float* x, const float* bias, int64_t N, int64_t c0, int64_t n, float* out) {
  for (int64_t i = 0, c = c0 % N; i < n; c = 0) {
    const int64_t len = std::min(n - i, N - c);
    internal::AddRange(x + i, bias + c, out + i, len);
    i += len;
  }
}

// Elements per block of the kernels that work on f32 copies (16-bit BiasAdd, the dropouts): the
// block's f32 values and dropout factors stay in L1.
constexpr int64_t kDropoutBlock = 256;

template <typename T>
void BiasAddCpu(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                const TensorView& y) {
  const int64_t N = bias.numel();
  const int64_t n = x.numel();
  if (n == 0) return;
  std::vector<float> b(N);
  const T* pbias = bias.data_as<T>();
  for (int64_t c = 0; c < N; ++c) b[c] = ToFloat(pbias[c]);
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  ParallelFor(ctx.pool, n, kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<T, float>) {
      AddBiasRange(px + begin, b.data(), N, begin, end - begin, py + begin);
    } else {
      // 16-bit: blocks widened (SIMD), added in f32 and rounded once, as element by element.
      float buf[kDropoutBlock];
      for (int64_t b0 = begin; b0 < end; b0 += kDropoutBlock) {
        const int64_t len = std::min(end - b0, kDropoutBlock);
        internal::ToF32(px + b0, len, buf);
        AddBiasRange(buf, b.data(), N, b0, len, buf);
        internal::FromF32(buf, len, py + b0);
      }
    }
  });
}

// T: dy's element type; Out: dbias's (T, or float for mixed precision).
template <typename T, typename Out>
void BiasGradCpu(const ExecContext& ctx, const TensorView& dy, const TensorView& dbias) {
  const int64_t N = dbias.numel();
  const int64_t R = N == 0 ? 0 : dy.numel() / N;
  Out* out = dbias.data_as<Out>();
  if (N == 0) return;
  if (R == 0) {
    for (int64_t c = 0; c < N; ++c) out[c] = FromFloat<Out>(0.0f);
    return;
  }
  const int64_t blocks = std::min(kMaxRowBlocks, (R + kMinRowsPerBlock - 1) / kMinRowsPerBlock);
  const int64_t rows_per_block = (R + blocks - 1) / blocks;
  const int64_t col_chunks = (N + kColumnChunk - 1) / kColumnChunk;
  std::vector<float> partial(blocks * N);  // [blocks, N]
  const T* pdy = dy.data_as<T>();
  const int64_t grain = std::max<int64_t>(1, kGrain / (rows_per_block * std::min(N, kColumnChunk)));
  ParallelFor(ctx.pool, blocks * col_chunks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task) {
      const int64_t blk = task / col_chunks;
      const int64_t c0 = (task % col_chunks) * kColumnChunk;
      const int64_t c1 = std::min(N, c0 + kColumnChunk);
      const int64_t r0 = blk * rows_per_block;
      const int64_t r1 = std::min(R, r0 + rows_per_block);
      float* acc = partial.data() + blk * N;
      for (int64_t c = c0; c < c1; ++c) acc[c] = 0.0f;
      for (int64_t r = r0; r < r1; ++r) {
        const T* row = pdy + r * N;
        if constexpr (std::is_same_v<T, float>) {
          internal::AddRange(acc + c0, row + c0, acc + c0, c1 - c0);
        } else {
          for (int64_t c = c0; c < c1; ++c) acc[c] += ToFloat(row[c]);
        }
      }
    }
  });
  ParallelFor(ctx.pool, N, kGrain / blocks + 1, [&](int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) {
      float s = 0.0f;
      for (int64_t blk = 0; blk < blocks; ++blk) s += partial[blk * N + c];
      out[c] = FromFloat<Out>(s);
    }
  });
}

// x Phi(x) and its derivative Phi(x) + x phi(x).
constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
inline float GeluErfForward(float x) { return 0.5f * x * (1.0f + std::erf(x * kInvSqrt2)); }
inline float GeluErfGrad(float x, float dy) {
  const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
  return dy * (cdf + x * kInvSqrt2Pi * std::exp(-0.5f * x * x));
}

template <typename From, typename To>
void ConvertCpu(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  const From* px = x.data_as<From>();
  To* py = y.data_as<To>();
  // Widening to f32 is exact, so the one rounding is FromFloat's (nearest even).
  ParallelFor(ctx.pool, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    if constexpr (std::is_same_v<From, float>) {
      internal::FromF32(px + begin, end - begin, py + begin);
    } else if constexpr (std::is_same_v<To, float>) {
      internal::ToF32(px + begin, end - begin, py + begin);
    } else {
      for (int64_t i = begin; i < end; ++i) py[i] = FromFloat<To>(ToFloat(px[i]));
    }
  });
}

// Rounds a double to f32 with "round to odd" (truncate, then set the last bit if inexact). A
// second rounding of that f32 to bf16/f16 (nearest even) then equals a single rounding of the
// double, since f32 keeps more than two extra bits.
float RoundToOddF32(double v) {
  float f = static_cast<float>(v);
  if (std::isnan(v) || static_cast<double>(f) == v) return f;
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = std::nextafter(f, 0.0f);
  return BitsToFloat(FloatBits(f) | 1u);
}

template <typename T>
void FillCpu(const ExecContext& ctx, const TensorView& x, T value) {
  T* p = static_cast<T*>(x.data);
  ParallelFor(ctx.pool, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) p[i] = value;
  });
}

// f32 values of src[0, n): src itself for T = float, else widened into buf.
template <typename T>
const float* AsFloat(const T* src, int64_t n, float* buf) {
  if constexpr (std::is_same_v<T, float>) {
    return src;
  } else {
    internal::ToF32(src, n, buf);  // SIMD for 16-bit types, bitwise ToFloat.
    return buf;
  }
}

// dst[0, n) = src rounded to T (nothing to do where dst is src, for T = float).
template <typename T>
void StoreFloat(const float* src, int64_t n, T* dst) {
  if constexpr (std::is_same_v<T, float>) {
    if (src == dst) return;
  }
  internal::FromF32(src, n, dst);  // SIMD for bf16, bitwise FromFloat.
}

template <typename T>
void DropoutCpu(const ExecContext& ctx, const TensorView& x, const DropoutArgs& args,
                const TensorView& y) {
  const T* px = x.data_as<T>();
  T* py = y.data_as<T>();
  const float scale = 1.0f / (1.0f - args.p);
  ParallelFor(ctx.pool, x.numel(), kGrain, [&](int64_t begin, int64_t end) {
    internal::DropoutFactors<kDropoutBlock> mask(&args);
    float factor[kDropoutBlock], buf[kDropoutBlock];
    for (int64_t b0 = begin; b0 < end; b0 += kDropoutBlock) {
      const int64_t len = std::min(end - b0, kDropoutBlock);
      mask.Factors(b0, len, scale, factor);
      float* out = std::is_same_v<T, float> ? reinterpret_cast<float*>(py + b0) : buf;
      internal::DropoutRange(AsFloat(px + b0, len, buf), factor, out, len);
      StoreFloat(out, len, py + b0);
    }
  });
}

// The dropped-out branch (x + bias, times its dropout factor) is rounded to f32 in a buffer before
// the residual add: each step rounds as in the unfused chain (no FMA; elementwise_simd.h).
template <typename T, bool kBias>
void BiasDropoutAddCpu(const ExecContext& ctx, const TensorView& x, const TensorView* bias,
                       const DropoutArgs& args, const TensorView& residual, const TensorView& out) {
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t N = x.dim(-1);
  std::vector<float> b(kBias ? N : 0);
  if (kBias) {
    const T* pbias = bias->data_as<T>();
    for (int64_t c = 0; c < N; ++c) b[c] = ToFloat(pbias[c]);
  }
  const bool drop = args.p > 0.0f;
  const float scale = 1.0f / (1.0f - args.p);  // As DropoutCpu computes it.
  const T* px = x.data_as<T>();
  const T* pr = residual.data_as<T>();
  T* po = out.data_as<T>();
  ParallelFor(ctx.pool, n, kGrain, [&](int64_t begin, int64_t end) {
    internal::DropoutFactors<kDropoutBlock> mask(&args);
    float branch[kDropoutBlock], factor[kDropoutBlock], buf[kDropoutBlock];
    for (int64_t b0 = begin; b0 < end; b0 += kDropoutBlock) {
      const int64_t len = std::min(end - b0, kDropoutBlock);
      const float* xf = AsFloat(px + b0, len, buf);
      if (kBias) {
        AddBiasRange(xf, b.data(), N, b0, len, branch);
      } else {
        std::copy(xf, xf + len, branch);
      }
      if (drop) {
        mask.Factors(b0, len, scale, factor);
        internal::DropoutRange(branch, factor, branch, len);
      }
      // Reads each element of x and residual before writing out's: out may alias either.
      float* sum = std::is_same_v<T, float> ? reinterpret_cast<float*>(po + b0) : buf;
      internal::AddRange(AsFloat(pr + b0, len, buf), branch, sum, len);
      StoreFloat(sum, len, po + b0);
    }
  });
}

// Converting between dtypes in place would overwrite unread input.
absl::Status CheckConvertOverlap(absl::string_view op, const TensorView& x, const TensorView& y) {
  if (Overlap(x, y)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": x (", x.DebugString(), ") and y (", y.DebugString(),
                     ") overlap; converting in place needs equal dtypes"));
  }
  return absl::OkStatus();
}

// Fills x with `value` on its device.
template <typename T>
absl::Status FillTyped(const ExecContext& ctx, const TensorView& x, T value) {
  MT_ROUTE_DEVICE("Fill", x, cuda::Fill(ctx, x, &value, sizeof(T)));
  FillCpu<T>(ctx, x, value);
  return absl::OkStatus();
}

absl::Status DropoutImpl(absl::string_view op, const ExecContext& ctx, const TensorView& x,
                         absl::string_view x_name, const DropoutArgs& args, const TensorView& y,
                         absl::string_view y_name) {
  RETURN_IF_ERROR(CheckMatching(op, {{x_name, &x}, {y_name, &y}}, kFloatDTypes));
  RETURN_IF_ERROR(CheckDropoutArgs(op, args));
  MT_ROUTE_DEVICE(op, x, cuda::Dropout(op, ctx, x, internal::CudaDropoutParams(args), y));
  if (args.p == 0.0f) {
    if (x.data != y.data) std::memmove(y.data, x.data, x.nbytes());
    return absl::OkStatus();
  }
  DispatchFloat(x.dtype, [&](auto tag) { DropoutCpu<decltype(tag)>(ctx, x, args, y); });
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckDropoutArgs(absl::string_view op, const DropoutArgs& args) {
  if (!(args.p >= 0.0f && args.p < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": dropout probability p = ", args.p, " is outside [0, 1)"));
  }
  if (args.key_base < 0 || args.key_inner < 0 ||
      (args.key_inner > 0 && args.key_outer_stride < args.key_inner)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bad dropout key mapping (key_base ", args.key_base, ", key_inner ",
                     args.key_inner, ", key_outer_stride ", args.key_outer_stride,
                     "); need key_base >= 0, key_inner >= 0 and key_outer_stride >= key_inner"));
  }
  return absl::OkStatus();
}

absl::Status BiasAdd(const ExecContext& ctx, const TensorView& x, const TensorView& bias,
                     const TensorView& y) {
  constexpr absl::string_view kOp = "BiasAdd";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"x", &x}, {"y", &y}}, kFloatDTypes));
  RETURN_IF_ERROR(CheckOperands(kOp, {{"x", &x}, {"bias", &bias}}, kFloatDTypes));
  RETURN_IF_ERROR(CheckDTypeOf(kOp, {"bias", &bias}, {"x", &x}));
  RETURN_IF_ERROR(CheckMinRank(kOp, "x", x, 1));
  RETURN_IF_ERROR(CheckShape(kOp, "bias", bias, {x.dim(-1)}));
  MT_ROUTE_DEVICE(kOp, x, cuda::BiasAdd(ctx, x, bias, y));
  DispatchFloat(x.dtype, [&](auto tag) { BiasAddCpu<decltype(tag)>(ctx, x, bias, y); });
  return absl::OkStatus();
}

absl::Status BiasGrad(const ExecContext& ctx, const TensorView& dy, const TensorView& dbias) {
  constexpr absl::string_view kOp = "BiasGrad";
  RETURN_IF_ERROR(CheckOperands(kOp, {{"dy", &dy}, {"dbias", &dbias}}, kFloatDTypes));
  if (dbias.dtype != dy.dtype && dbias.dtype != DType::kF32) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOp, ": dbias has dtype ", DTypeName(dbias.dtype), ", expected ",
                     DTypeName(dy.dtype), " (the dtype of dy) or f32"));
  }
  RETURN_IF_ERROR(CheckMinRank(kOp, "dy", dy, 1));
  RETURN_IF_ERROR(CheckShape(kOp, "dbias", dbias, {dy.dim(-1)}));
  MT_ROUTE_DEVICE(kOp, dy, cuda::BiasGrad(ctx, dy, dbias));
  DispatchFloat(dy.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (dbias.dtype == dy.dtype) {
      BiasGradCpu<T, T>(ctx, dy, dbias);
    } else {
      BiasGradCpu<T, float>(ctx, dy, dbias);
    }
  });
  return absl::OkStatus();
}

absl::Status Gelu(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  constexpr absl::string_view kOp = "Gelu";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"x", &x}, {"y", &y}}, kFloatDTypes));
  MT_ROUTE_DEVICE(kOp, x, cuda::Gelu(ctx, x, y));
  DispatchFloat(x.dtype, [&](auto tag) {
    internal::MapUnaryRanges<decltype(tag)>(ctx, x, y, internal::GeluTanhRange);
  });
  return absl::OkStatus();
}

absl::Status GeluBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                          const TensorView& dx) {
  constexpr absl::string_view kOp = "GeluBackward";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"x", &x}, {"dy", &dy}, {"dx", &dx}}, kFloatDTypes));
  MT_ROUTE_DEVICE(kOp, x, cuda::GeluBackward(ctx, x, dy, dx));
  DispatchFloat(x.dtype, [&](auto tag) {
    internal::MapBinaryRanges<decltype(tag)>(ctx, x, dy, dx, internal::GeluTanhGradRange);
  });
  return absl::OkStatus();
}

absl::Status Gelu(const ExecContext& ctx, const TensorView& x, const TensorView& y, GeluForm form) {
  if (form == GeluForm::kTanh) return Gelu(ctx, x, y);
  return RunUnary("Gelu(erf)", ctx, {"x", &x}, {"y", &y}, &cuda::GeluErf, GeluErfForward);
}

absl::Status GeluBackward(const ExecContext& ctx, const TensorView& x, const TensorView& dy,
                          const TensorView& dx, GeluForm form) {
  if (form == GeluForm::kTanh) return GeluBackward(ctx, x, dy, dx);
  return RunBinary("GeluBackward(erf)", ctx, {"x", &x}, {"dy", &dy}, {"dx", &dx},
                   &cuda::GeluErfBackward, GeluErfGrad);
}

absl::Status Add(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                 const TensorView& out) {
  return RunBinary("Add", ctx, {"a", &a}, {"b", &b}, {"out", &out}, &cuda::Add, internal::AddRange);
}

absl::Status Scale(const ExecContext& ctx, const TensorView& x, float alpha, const TensorView& y) {
  constexpr absl::string_view kOp = "Scale";
  RETURN_IF_ERROR(CheckMatching(kOp, {{"x", &x}, {"y", &y}}, kFloatDTypes));
  MT_ROUTE_DEVICE(kOp, x, cuda::Scale(ctx, x, alpha, y));
  DispatchFloat(x.dtype, [&](auto tag) {
    internal::MapUnaryRanges<decltype(tag)>(ctx, x, y,
                                            [alpha](const float* in, float* out, int64_t n) {
                                              internal::ScaleRange(in, alpha, out, n);
                                            });
  });
  return absl::OkStatus();
}

absl::Status Convert(const ExecContext& ctx, const TensorView& x, const TensorView& y) {
  constexpr absl::string_view kOp = "Convert";
  RETURN_IF_ERROR(CheckOperands(kOp, {{"x", &x}, {"y", &y}}, kFloatDTypes));
  RETURN_IF_ERROR(CheckShape(kOp, "y", y, x.shape));
  if (x.dtype != y.dtype) RETURN_IF_ERROR(CheckConvertOverlap(kOp, x, y));
  MT_ROUTE_DEVICE(kOp, x, cuda::Convert(ctx, x, y));
  if (x.dtype == y.dtype) {
    if (x.data != y.data) std::memmove(y.data, x.data, x.nbytes());
    return absl::OkStatus();
  }
  DispatchFloat(x.dtype, [&](auto from) {
    DispatchFloat(y.dtype, [&](auto to) { ConvertCpu<decltype(from), decltype(to)>(ctx, x, y); });
  });
  return absl::OkStatus();
}

absl::Status Fill(const ExecContext& ctx, const TensorView& x, double value) {
  constexpr absl::string_view kOp = "Fill";
  RETURN_IF_ERROR(CheckContiguous(kOp, "x", x));
  if (IsInteger(x.dtype)) {
    double lo = 0, hi = 0;  // The integers representable in x's dtype are [lo, hi).
    switch (x.dtype) {
      case DType::kI32:
        lo = -2147483648.0, hi = 2147483648.0;
        break;
      case DType::kI64:
        lo = -9223372036854775808.0, hi = 9223372036854775808.0;
        break;
      default:  // kU16.
        lo = 0.0, hi = 65536.0;
        break;
    }
    const double t = std::trunc(value);
    if (!(t >= lo && t < hi)) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOp, ": value ", value, " is out of range for ", DTypeName(x.dtype)));
    }
    const int64_t v = static_cast<int64_t>(t);
    switch (x.dtype) {
      case DType::kI32:
        return FillTyped<int32_t>(ctx, x, static_cast<int32_t>(v));
      case DType::kI64:
        return FillTyped<int64_t>(ctx, x, v);
      default:
        return FillTyped<uint16_t>(ctx, x, static_cast<uint16_t>(v));
    }
  }
  RETURN_IF_ERROR(CheckDType(kOp, "x", x, kFloatDTypes));
  const float f = RoundToOddF32(value);
  absl::Status status;
  DispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    // f32 takes the correctly rounded value; the 16-bit formats round the round-to-odd f32.
    status = FillTyped<T>(
        ctx, x, FromFloat<T>(std::is_same<T, float>::value ? static_cast<float>(value) : f));
  });
  return status;
}

absl::Status Dropout(const ExecContext& ctx, const TensorView& x, const DropoutArgs& args,
                     const TensorView& y) {
  return DropoutImpl("Dropout", ctx, x, "x", args, y, "y");
}

absl::Status DropoutBackward(const ExecContext& ctx, const TensorView& dy, const DropoutArgs& args,
                             const TensorView& dx) {
  return DropoutImpl("DropoutBackward", ctx, dy, "dy", args, dx, "dx");
}

absl::Status BiasDropoutAdd(const ExecContext& ctx, const TensorView& x, const TensorView* bias,
                            const DropoutArgs& dropout, const TensorView& residual,
                            const TensorView& out) {
  constexpr absl::string_view kOp = "BiasDropoutAdd";
  RETURN_IF_ERROR(
      CheckMatching(kOp, {{"x", &x}, {"residual", &residual}, {"out", &out}}, kFloatDTypes));
  RETURN_IF_ERROR(CheckMinRank(kOp, "x", x, 1));
  if (bias != nullptr) {
    RETURN_IF_ERROR(CheckOperands(kOp, {{"x", &x}, {"bias", bias}}, kFloatDTypes));
    RETURN_IF_ERROR(CheckDTypeOf(kOp, {"bias", bias}, {"x", &x}));
    RETURN_IF_ERROR(CheckShape(kOp, "bias", *bias, {x.dim(-1)}));
  }
  RETURN_IF_ERROR(CheckDropoutArgs(kOp, dropout));
  MT_ROUTE_DEVICE(
      kOp, x,
      cuda::BiasDropoutAdd(ctx, x, bias, internal::CudaDropoutParams(dropout), residual, out));
  DispatchFloat(x.dtype, [&](auto tag) {
    using T = decltype(tag);
    if (bias != nullptr) {
      BiasDropoutAddCpu<T, true>(ctx, x, bias, dropout, residual, out);
    } else {
      BiasDropoutAddCpu<T, false>(ctx, x, bias, dropout, residual, out);
    }
  });
  return absl::OkStatus();
}

}  // namespace ops
}  // namespace mt
