#include "core/ops/gemm.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/gemm_shape.h"
#include "core/onednn.h"
#include "core/openblas.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/gemm_cpu.h"
#include "core/ops/gemm_onednn.h"
#include "core/ops/gemm_packed.h"
#include "core/ops/gemm_rows_simd.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace ops {
namespace {

// The operands' 16-bit dtype, or f32 when both are f32.
DType HalfDType(const TensorView& a, const TensorView& b) {
  return a.dtype == DType::kF32 ? b.dtype : a.dtype;
}

std::string Described(const TensorView& t, bool transposed) {
  return absl::StrCat(DTypeName(t.dtype), ShapeToString(t.shape),
                      transposed ? " (transposed)" : "");
}

// Everything a caller can get wrong, for both Gemm (rank 2) and BatchedGemm (rank 3).
absl::StatusOr<GemmShape> Validate(const char* op, int rank, const TensorView& a,
                                   const TensorView& b, const TensorView& c,
                                   const GemmOptions& options) {
  RETURN_IF_ERROR(CheckRank(op, "A", a, rank));
  RETURN_IF_ERROR(CheckRank(op, "B", b, rank));
  RETURN_IF_ERROR(CheckRank(op, "C", c, rank));
  RETURN_IF_ERROR(CheckSameDevice(op, {&a, &b, &c}));
  RETURN_IF_ERROR(CheckDType(op, "A", a, {DType::kF32, DType::kBF16, DType::kF16}));
  RETURN_IF_ERROR(CheckDType(op, "B", b, {DType::kF32, DType::kBF16, DType::kF16}));
  // On the CPU a 16-bit operand may meet an f32 one (f32 weights beside 16-bit activations).
  const bool mixed = b.dtype != a.dtype && (a.dtype == DType::kF32 || b.dtype == DType::kF32) &&
                     a.device.type == DeviceType::kCpu;
  if ((b.dtype != a.dtype && !mixed) || (c.dtype != HalfDType(a, b) && c.dtype != DType::kF32)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": A and B must share one dtype (on the CPU one of them may be f32 beside a 16-bit ",
        "one) and C must have the 16-bit one or be f32, got A ", DTypeName(a.dtype), ", B ",
        DTypeName(b.dtype), ", C ", DTypeName(c.dtype)));
  }
  RETURN_IF_ERROR(CheckContiguous(op, "A", a));
  RETURN_IF_ERROR(CheckContiguous(op, "B", b));
  RETURN_IF_ERROR(CheckContiguous(op, "C", c));

  GemmShape s;
  s.trans_a = options.transpose_a == Transpose::kYes;
  s.trans_b = options.transpose_b == Transpose::kYes;
  const int r = rank - 2;  // Index of the matrix rows.
  if (rank == 3) {
    s.batch = a.dim(0);
    if (b.dim(0) != s.batch || c.dim(0) != s.batch) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": batch sizes differ: A is ", Described(a, false), ", B is ",
                       Described(b, false), ", C is ", Described(c, false)));
    }
  }
  s.m = s.trans_a ? a.dim(r + 1) : a.dim(r);
  s.k = s.trans_a ? a.dim(r) : a.dim(r + 1);
  const int64_t k_b = s.trans_b ? b.dim(r + 1) : b.dim(r);
  s.n = s.trans_b ? b.dim(r) : b.dim(r + 1);
  if (k_b != s.k) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": A is ", Described(a, s.trans_a), " and B is ", Described(b, s.trans_b),
                     ": inner dimensions ", s.k, " and ", k_b, " differ"));
  }
  Shape expected_c = rank == 3 ? Shape{s.batch, s.m, s.n} : Shape{s.m, s.n};
  if (c.shape != expected_c) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": C is ", Described(c, false), ", expected ", ShapeToString(expected_c),
                     " for A ", Described(a, s.trans_a), " times B ", Described(b, s.trans_b)));
  }
  if (Overlap(c, a) || Overlap(c, b)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": C overlaps ", Overlap(c, a) ? "A" : "B",
                     " in memory; write the product to a separate tensor"));
  }
  return s;
}

bool HasEpilogue(const GemmOptions& options) {
  return options.bias != nullptr || options.epilogue != Epilogue::kNone ||
         options.pre_activation != nullptr;
}

// The fused epilogue's operands (gemm.h), after Validate accepted A, B and C.
absl::Status ValidateEpilogue(const char* op, int rank, const GemmShape& s, const TensorView& a,
                              const TensorView& b, const TensorView& c,
                              const GemmOptions& options) {
  if (!HasEpilogue(options)) return absl::OkStatus();
  if (rank != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": a bias, epilogue or pre_activation is supported by Gemm only (not batched)"));
  }
  if (options.beta != 0.0f) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": a bias, epilogue or pre_activation needs beta = 0, got beta = ", options.beta));
  }
  if (options.epilogue != Epilogue::kNone && options.epilogue != Epilogue::kGelu) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": unknown epilogue ", static_cast<int>(options.epilogue)));
  }
  const NamedView c_named{"C", &c};
  if (const TensorView* bias = options.bias; bias != nullptr) {
    RETURN_IF_ERROR(CheckShape(op, "bias", *bias, {s.n}));
    if (bias->dtype != HalfDType(a, b) && bias->dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": bias has dtype ", DTypeName(bias->dtype), ", expected ",
                       DTypeName(HalfDType(a, b)), " (the dtype of the operands) or f32"));
    }
    RETURN_IF_ERROR(CheckDeviceOf(op, {"bias", bias}, c_named));
    RETURN_IF_ERROR(CheckContiguous(op, "bias", *bias));
    if (Overlap(*bias, c)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": bias overlaps C in memory; pass a separate bias tensor"));
    }
  }
  if (const TensorView* pre = options.pre_activation; pre != nullptr) {
    if (options.epilogue != Epilogue::kGelu) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": pre_activation is only written with Epilogue::kGelu"));
    }
    RETURN_IF_ERROR(CheckShape(op, "pre_activation", *pre, {s.m, s.n}));
    RETURN_IF_ERROR(CheckDTypeOf(op, {"pre_activation", pre}, c_named));
    RETURN_IF_ERROR(CheckDeviceOf(op, {"pre_activation", pre}, c_named));
    RETURN_IF_ERROR(CheckContiguous(op, "pre_activation", *pre));
    const NamedView others[] = {{"A", &a}, {"B", &b}, c_named, {"bias", options.bias}};
    for (const NamedView& o : others) {
      if (o.view != nullptr && Overlap(*pre, *o.view)) {
        return absl::InvalidArgumentError(absl::StrCat(
            op, ": pre_activation overlaps ", o.name, " in memory; write it to a separate tensor"));
      }
    }
  }
  return absl::OkStatus();
}

// ---- The CPU: f32 on the chosen kernel, bf16/f16 natively on oneDNN or widened to f32. ----

// The epilogue of an f32 C that holds the f32 product, in place.
void F32Epilogue(const ExecContext& ctx, const GemmShape& s, const GemmOptions& options,
                 const TensorView& c) {
  if (!HasEpilogue(options)) return;
  float* pc = c.data_as<float>();
  internal::ApplyEpilogue<float>(
      ctx.pool, s, options, pc, pc,
      options.pre_activation == nullptr ? nullptr : options.pre_activation->data_as<float>());
}

// A 16-bit C: the f32 product `p` with the epilogue, or narrowed, rounded once into C.
template <typename T>
void Finish16(const ExecContext& ctx, const GemmShape& s, const GemmOptions& options,
              const float* p, const TensorView& c) {
  if (HasEpilogue(options)) {
    internal::ApplyEpilogue<T>(
        ctx.pool, s, options, p, c.data_as<T>(),
        options.pre_activation == nullptr ? nullptr : options.pre_activation->data_as<T>());
  } else {
    internal::Narrow(ctx.pool, p, c.numel(), c.data_as<T>());
  }
}

// The f32 product of operands A (TA) and B (TB) into `c32` (C itself for an f32 C).
template <typename TA, typename TB>
void ProductF32(CpuGemmBackend backend, const ExecContext& ctx, const GemmShape& s,
                const GemmOptions& options, const TensorView& a, const TensorView& b, float* c32) {
  if (backend == CpuGemmBackend::kPacked) {
    internal::PackedGemm<TA, TB>(ctx, s, options.alpha, a.data_as<TA>(), b.data_as<TB>(),
                                 options.beta, c32);
  } else if constexpr (std::is_same_v<TA, float> && std::is_same_v<TB, float>) {
    internal::GemmF32(backend, ctx, s, options.alpha, a.data_as<float>(), b.data_as<float>(),
                      options.beta, c32);
  } else {
    internal::WidenedGemm<TA, TB>(backend, ctx, s, options.alpha, a.data_as<TA>(), b.data_as<TB>(),
                                  options.beta, c32);
  }
}

// OpenBLAS, Eigen or the packed GEMM. f32 runs in place; bf16 and f16 operands are widened to f32
// piece by piece, or by the packed GEMM's packing (an f32 operand beside a 16-bit one is read in
// place), multiplied with f32 accumulation, and rounded back once to a 16-bit C (or, for an f32
// C, written and accumulated in place without rounding). H: the operands' 16-bit dtype (float
// when both are f32), the dtype of a 16-bit C.
template <typename TA, typename TB = TA>
void GemmCpu(const ExecContext& ctx, CpuGemmBackend backend, const GemmShape& s,
             const GemmOptions& options, const TensorView& a, const TensorView& b,
             const TensorView& c) {
  using H = std::conditional_t<std::is_same_v<TA, float>, TB, TA>;
  if (std::is_same_v<H, float> || c.dtype == DType::kF32) {
    ProductF32<TA, TB>(backend, ctx, s, options, a, b, c.data_as<float>());
    F32Epilogue(ctx, s, options, c);
    return;
  }
  float* c32 = internal::Scratch(2, c.numel());
  // With beta = 0, C is output only (and may hold NaNs or garbage): do not read it.
  if (options.beta != 0.0f) internal::Widen(ctx.pool, c.data_as<H>(), c.numel(), c32);
  ProductF32<TA, TB>(backend, ctx, s, options, a, b, c32);
  if constexpr (!std::is_same_v<H, float>) Finish16<H>(ctx, s, options, c32, c);
}

// ---- oneDNN: bf16 natively where it has a kernel, f32, and the rest widened to f32. ----

template <typename T>
absl::Status GemmOneDnnTyped(const ExecContext& ctx, const GemmShape& s, const GemmOptions& options,
                             const TensorView& a, const TensorView& b, const TensorView& c) {
  if (s.m == 0 || s.n == 0) return absl::OkStatus();
  if (s.k == 0 || options.alpha == 0.0f) {  // No product: as on the other backends.
    GemmCpu<T>(ctx, CpuGemmBackend::kEigen, s, options, a, b, c);
    return absl::OkStatus();
  }
  const TensorView* bias = options.bias;
  // oneDNN cannot also write the pre-activation, and scales the bias with alpha.
  const bool fuse = options.pre_activation == nullptr && (bias == nullptr || options.alpha == 1.0f);
  const bool native = std::is_same_v<T, float> ||
                      (a.dtype == DType::kBF16 && internal::OneDnnHasBf16Kernel(c.dtype));
  internal::OneDnnProblem p;
  p.shape = s;
  p.alpha = options.alpha;
  p.beta = options.beta;
  p.bias = fuse && bias != nullptr;
  p.gelu = fuse && options.epilogue == Epilogue::kGelu;
  p.ab = native ? a.dtype : DType::kF32;
  const void* a_data = a.data;
  const void* b_data = b.data;
  if constexpr (!std::is_same_v<T, float>) {
    if (!native) {
      float* a32 = internal::Scratch(0, a.numel());
      float* b32 = internal::Scratch(1, b.numel());
      internal::Widen(ctx.pool, a.data_as<T>(), a.numel(), a32);
      internal::Widen(ctx.pool, b.data_as<T>(), b.numel(), b32);
      a_data = a32;
      b_data = b32;
    }
  }
  std::vector<float> bias32;
  const void* bias_data = nullptr;
  if (p.bias) {
    p.bias_dtype = native ? bias->dtype : DType::kF32;
    // oneDNN's f32 matmul takes an f32 bias.
    if (!native && bias->dtype != DType::kF32) bias32 = internal::WidenedBias(bias);
    bias_data = bias32.empty() ? bias->data : bias32.data();
  }
  // The product goes to C itself when oneDNN can write C as the op must; otherwise to f32 scratch
  // that is then finished (epilogue, rounding) here.
  const bool direct = c.dtype == DType::kF32 || (native && fuse);
  p.c = direct ? c.dtype : DType::kF32;
  float* c32 = direct ? nullptr : internal::Scratch(2, c.numel());
  if constexpr (!std::is_same_v<T, float>) {
    if (!direct && options.beta != 0.0f) {
      internal::Widen(ctx.pool, c.data_as<T>(), c.numel(), c32);
    }
  }
  RETURN_IF_ERROR(internal::OneDnnMatmul(p, ctx.num_threads(), a_data, b_data,
                                         direct ? c.data : c32, bias_data));
  if (c.dtype == DType::kF32) {
    if (!fuse) F32Epilogue(ctx, s, options, c);
    return absl::OkStatus();
  }
  if constexpr (!std::is_same_v<T, float>) {
    if (!direct && fuse) internal::Narrow(ctx.pool, c32, c.numel(), c.data_as<T>());
    if (!direct && !fuse) Finish16<T>(ctx, s, options, c32, c);
  }
  return absl::OkStatus();
}

absl::Status GemmOneDnn(const char* op, const ExecContext& ctx, const GemmShape& s,
                        const GemmOptions& options, const TensorView& a, const TensorView& b,
                        const TensorView& c) {
  absl::Status st;
  internal::DispatchFloat(
      a.dtype, [&](auto tag) { st = GemmOneDnnTyped<decltype(tag)>(ctx, s, options, a, b, c); });
  if (st.ok()) return st;
  return absl::Status(st.code(), absl::StrCat(op, ": ", st.message()));
}

// The CUDA backend's description of the product (cuda::Gemm).
cuda::GemmDims CudaDims(const GemmShape& s, const GemmOptions& options) {
  cuda::GemmDims dims;
  static_cast<GemmShape&>(dims) = s;
  dims.alpha = options.alpha;
  dims.beta = options.beta;
  dims.bias = options.bias;
  dims.gelu = options.epilogue == Epilogue::kGelu;
  dims.pre_activation = options.pre_activation;
  return dims;
}

// Mixed operands (one f32, one of `half`): oneDNN 2.6 has no such matmul, so they run on Eigen or
// the packed GEMM when asked for, else where kDefault sends `half` if that is the packed GEMM, else
// on OpenBLAS.
CpuGemmBackend MixedBackend(CpuGemmBackend asked, DType half) {
  if (asked == CpuGemmBackend::kEigen || asked == CpuGemmBackend::kPacked) return asked;
  if (asked == CpuGemmBackend::kDefault &&
      ResolveCpuGemmBackend(asked, half) == CpuGemmBackend::kPacked) {
    return CpuGemmBackend::kPacked;
  }
  return CpuGemmBackend::kOpenBlas;
}

absl::Status Run(const char* op, int rank, const ExecContext& ctx, const TensorView& a,
                 const TensorView& b, const TensorView& c, const GemmOptions& options) {
  ASSIGN_OR_RETURN(GemmShape s, Validate(op, rank, a, b, c, options));
  RETURN_IF_ERROR(ValidateEpilogue(op, rank, s, a, b, c, options));
  MT_ROUTE_DEVICE(op, a, cuda::Gemm(op, ctx, a, b, c, CudaDims(s, options)));
  if (ctx.row_invariant_gemm && a.dtype == DType::kF32 && b.dtype == DType::kF32 &&
      c.dtype == DType::kF32 && !s.trans_a && s.batch == 1) {
    internal::RowInvariantGemmF32(ctx.pool, s.m, s.n, s.k, options.alpha, a.data_as<float>(),
                                  b.data_as<float>(), s.trans_b, options.beta, c.data_as<float>());
    F32Epilogue(ctx, s, options, c);
    return absl::OkStatus();
  }
  const bool mixed = a.dtype != b.dtype;
  const CpuGemmBackend backend = mixed ? MixedBackend(options.cpu_backend, HalfDType(a, b))
                                       : ResolveCpuGemmBackend(options.cpu_backend, a.dtype);
  if (backend == CpuGemmBackend::kPacked && !PackedGemmAvailable()) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": the packed GEMM needs AVX2 and FMA, which this CPU lacks (",
                     CpuFeaturesString(DetectCpuFeatures()), ")"));
  }
  if (backend == CpuGemmBackend::kOneDnn) return GemmOneDnn(op, ctx, s, options, a, b, c);
  if (backend == CpuGemmBackend::kOpenBlas && !LoadOpenBlas().status.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": ", LoadOpenBlas().status.message(), "; or use CpuGemmBackend::kEigen"));
  }
  if (backend == CpuGemmBackend::kOpenBlas &&
      std::max({s.m, s.n, s.k}) > static_cast<int64_t>(INT_MAX)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": M = ", s.m, ", N = ", s.n, ", K = ", s.k,
        " exceed OpenBLAS's 32-bit dimensions; split the product or use CpuGemmBackend::kEigen"));
  }
  if (mixed) {
    const bool bf = HalfDType(a, b) == DType::kBF16;
    if (a.dtype == DType::kF32) {
      bf ? GemmCpu<float, bf16>(ctx, backend, s, options, a, b, c)
         : GemmCpu<float, f16>(ctx, backend, s, options, a, b, c);
    } else {
      bf ? GemmCpu<bf16, float>(ctx, backend, s, options, a, b, c)
         : GemmCpu<f16, float>(ctx, backend, s, options, a, b, c);
    }
    return absl::OkStatus();
  }
  switch (a.dtype) {
    case DType::kF32:
      GemmCpu<float>(ctx, backend, s, options, a, b, c);
      break;
    case DType::kBF16:
      GemmCpu<bf16>(ctx, backend, s, options, a, b, c);
      break;
    case DType::kF16:
      GemmCpu<f16>(ctx, backend, s, options, a, b, c);
      break;
    default:
      LOG(FATAL) << op << ": dtype " << DTypeName(a.dtype) << " passed validation";
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Gemm(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                  const TensorView& c, const GemmOptions& options) {
  return Run("Gemm", 2, ctx, a, b, c, options);
}

absl::Status BatchedGemm(const ExecContext& ctx, const TensorView& a, const TensorView& b,
                         const TensorView& c, const GemmOptions& options) {
  return Run("BatchedGemm", 3, ctx, a, b, c, options);
}

bool PackedGemmAvailable() {
  static const bool supported = internal::PackedGemmSupported(DetectCpuFeatures());
  return supported;
}

namespace {

// bf16 where no bf16 kernel runs: the packed GEMM, which widens while it packs and runs at
// OpenBLAS's f32 rate (AVX2 or AVX-512 kernel), without OpenBLAS's separate widening pass; OpenBLAS
// after widening only on a CPU without AVX2 and FMA (docs/perf/gemm.md).
CpuGemmBackend WidenedBf16Backend(const CpuFeatures& features) {
  return internal::PackedGemmSupported(features) ? CpuGemmBackend::kPacked
                                                 : CpuGemmBackend::kOpenBlas;
}

}  // namespace

CpuGemmBackend DefaultCpuGemmBackend(DType dtype, const CpuFeatures& features) {
  if (dtype != DType::kBF16) return CpuGemmBackend::kOpenBlas;
  if (features.UsableAvx512Bf16() || features.UsableAmxBf16()) return CpuGemmBackend::kOneDnn;
  return WidenedBf16Backend(features);
}

CpuGemmBackend ResolveCpuGemmBackend(CpuGemmBackend backend, DType dtype) {
  if (backend != CpuGemmBackend::kDefault) return backend;
  static const CpuFeatures features = DetectCpuFeatures();
  const CpuGemmBackend chosen = DefaultCpuGemmBackend(dtype, features);
  if (dtype != DType::kBF16) return chosen;
  // oneDNN held below its bf16 kernels (ONEDNN_MAX_CPU_ISA) would widen onto its own f32 matmul,
  // which is slower: widen as on a CPU without the features.
  if (chosen == CpuGemmBackend::kOneDnn && LoadOneDnn().status.ok() &&
      internal::OneDnnHasBf16Kernel(DType::kBF16)) {
    return chosen;
  }
  return WidenedBf16Backend(features);
}

const char* CpuGemmBackendName(CpuGemmBackend backend) {
  switch (ResolveCpuGemmBackend(backend, DType::kF32)) {
    case CpuGemmBackend::kEigen:
      return "eigen";
    case CpuGemmBackend::kOpenBlas:
      return "openblas";
    case CpuGemmBackend::kOneDnn:
      return "onednn";
    case CpuGemmBackend::kPacked:
      return "packed";
    case CpuGemmBackend::kDefault:
      break;
  }
  LOG(FATAL) << "unresolved CPU GEMM backend";
  return "";
}

std::string CpuGemmRoute(DType dtype) {
  const CpuGemmBackend backend = ResolveCpuGemmBackend(CpuGemmBackend::kDefault, dtype);
  const char* name = CpuGemmBackendName(backend);
  if (dtype == DType::kF32) return name;
  if (backend == CpuGemmBackend::kOneDnn && dtype == DType::kBF16 &&
      internal::OneDnnHasBf16Kernel(DType::kBF16)) {
    return absl::StrCat(name, " (", LoadOneDnn().version, ", ",
                        internal::OneDnnBf16Implementation(), ")");
  }
  if (backend == CpuGemmBackend::kPacked)
    return absl::StrCat(name, ", widened to f32 while packed");
  return absl::StrCat(name, ", widened to f32");
}

std::string DescribeCpuGemm() {
  static const CpuFeatures features = DetectCpuFeatures();
  std::string why;
  if (DefaultCpuGemmBackend(DType::kBF16, features) != CpuGemmBackend::kOneDnn) {
    why = " (no AVX512-BF16 or AMX)";
  } else if (!LoadOneDnn().status.ok()) {
    why = absl::StrCat(" (", LoadOneDnn().status.message(), ")");
  } else if (!internal::OneDnnHasBf16Kernel(DType::kBF16)) {
    why = absl::StrCat(" (no bf16 kernel in ", DescribeOneDnn(LoadOneDnn()), ")");
  }
  return absl::StrCat("f32: ", CpuGemmRoute(DType::kF32), "; bf16: ", CpuGemmRoute(DType::kBF16),
                      why, "; f16: ", CpuGemmRoute(DType::kF16));
}

}  // namespace ops
}  // namespace mt
