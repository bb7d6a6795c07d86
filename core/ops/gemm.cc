#include "core/ops/gemm.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "absl/strings/str_cat.h"
#include "core/gemm_shape.h"
#include "core/openblas.h"
#include "core/ops/check.h"
#include "core/ops/dispatch.h"
#include "core/ops/gelu_simd.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace ops {
namespace {

// OpenBLAS beats Eigen on the machines we measured (docs/perf/gemm.md).
constexpr CpuGemmBackend kFastestCpuBackend = CpuGemmBackend::kOpenBlas;

// Elements per chunk when widening/narrowing bf16 and f16 operands on the pool.
constexpr int64_t kConvertGrain = 1 << 16;
// Elements per chunk of the epilogue (whole rows; GeLU's tanh makes elements dearer).
constexpr int64_t kEpilogueGrain = 1 << 14;

CpuGemmBackend Resolve(CpuGemmBackend backend) {
  return backend == CpuGemmBackend::kDefault ? kFastestCpuBackend : backend;
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
  if (b.dtype != a.dtype || (c.dtype != a.dtype && c.dtype != DType::kF32)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": A and B must share one dtype and C must have it or be f32, got A ",
                     DTypeName(a.dtype), ", B ", DTypeName(b.dtype), ", C ", DTypeName(c.dtype)));
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
    if (bias->dtype != a.dtype && bias->dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": bias has dtype ", DTypeName(bias->dtype), ", expected ",
                       DTypeName(a.dtype), " (the dtype of A) or f32"));
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

// ---- f32 kernels: one [M, K] x [K, N] product, C = alpha op(A) op(B) + beta C. ----

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

void EigenGemm(const GemmShape& s, int num_threads, float alpha, const float* a, const float* b,
               float beta, float* c) {
  // Process-wide (OpenMP); Eigen only splits products that are large enough.
  Eigen::setNbThreads(num_threads);
  Eigen::Map<const RowMajorMatrix> a_mat(a, s.trans_a ? s.k : s.m, s.trans_a ? s.m : s.k);
  Eigen::Map<const RowMajorMatrix> b_mat(b, s.trans_b ? s.n : s.k, s.trans_b ? s.k : s.n);
  Eigen::Map<RowMajorMatrix> c_mat(c, s.m, s.n);
  // Transposed maps are free: Eigen's GEMM reads them through the other storage order.
  auto run = [&](const auto& op_a, const auto& op_b) {
    if (beta == 0.0f) {
      c_mat.noalias() = alpha * op_a * op_b;  // Overwrites C: NaNs in it do not propagate.
    } else {
      if (beta != 1.0f) c_mat *= beta;
      c_mat.noalias() += alpha * op_a * op_b;
    }
  };
  if (!s.trans_a && !s.trans_b) {
    run(a_mat, b_mat);
  } else if (!s.trans_a && s.trans_b) {
    run(a_mat, b_mat.transpose());
  } else if (s.trans_a && !s.trans_b) {
    run(a_mat.transpose(), b_mat);
  } else {
    run(a_mat.transpose(), b_mat.transpose());
  }
}

// OpenBLAS's Fortran-ABI sgemm, loaded with the CPU's best kernel (core/openblas.h). Debian's
// libopenblas uses 32-bit integers (the 64-bit-index build is libopenblas64).
void OpenBlasGemm(const GemmShape& s, int num_threads, float alpha, const float* a, const float* b,
                  float beta, float* c) {
  const OpenBlas& blas = LoadOpenBlas();  // Run checked that it loaded.
  blas.set_num_threads(num_threads);
  // BLAS is column-major, and a row-major [R, C] buffer is the column-major [C, R] transpose, so
  // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: pass B first, then A, with
  // their own transpose flags, and the leading dimensions of their row-major rows.
  const char trans_b = s.trans_b ? 'T' : 'N';
  const char trans_a = s.trans_a ? 'T' : 'N';
  const int m = static_cast<int>(s.n);
  const int n = static_cast<int>(s.m);
  const int k = static_cast<int>(s.k);
  const int ld_b = static_cast<int>(std::max<int64_t>(1, s.trans_b ? s.k : s.n));
  const int ld_a = static_cast<int>(std::max<int64_t>(1, s.trans_a ? s.m : s.k));
  const int ld_c = static_cast<int>(std::max<int64_t>(1, s.n));
  // BLAS treats beta = 0 as "C is output only", so NaNs in C do not propagate.
  blas.sgemm(&trans_b, &trans_a, &m, &n, &k, &alpha, b, &ld_b, a, &ld_a, &beta, c, &ld_c);
}

// All batch entries in f32. Degenerate problems are handled here so both backends agree: with
// K = 0 or alpha = 0 the product is zero and A and B are not read (as in BLAS).
void GemmF32(CpuGemmBackend backend, const GemmShape& s, int num_threads, float alpha,
             const float* a, const float* b, float beta, float* c) {
  if (s.m == 0 || s.n == 0) return;
  const int64_t size_a = s.m * s.k;
  const int64_t size_b = s.k * s.n;
  const int64_t size_c = s.m * s.n;
  if (s.k == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < s.batch * size_c; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  for (int64_t i = 0; i < s.batch; ++i) {
    if (backend == CpuGemmBackend::kEigen) {
      EigenGemm(s, num_threads, alpha, a + i * size_a, b + i * size_b, beta, c + i * size_c);
    } else {
      OpenBlasGemm(s, num_threads, alpha, a + i * size_a, b + i * size_b, beta, c + i * size_c);
    }
  }
}

template <typename T>
void Widen(ThreadPool* pool, const T* src, int64_t n, float* dst) {
  ParallelFor(pool, n, kConvertGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = ToFloat<T>(src[i]);
  });
}

template <typename T>
void Narrow(ThreadPool* pool, const float* src, int64_t n, T* dst) {
  ParallelFor(pool, n, kConvertGrain, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dst[i] = FromFloat<T>(src[i]);
  });
}

// ---- Epilogue: bias and GeLU on the f32 product, then the one rounding to C's dtype. ----

// The bias in f32 (empty without one).
std::vector<float> WidenedBias(const TensorView* bias) {
  std::vector<float> out;
  if (bias == nullptr) return out;
  out.resize(bias->numel());
  internal::DispatchFloat(bias->dtype, [&](auto tag) {
    using B = decltype(tag);
    const B* p = bias->data_as<B>();
    for (size_t j = 0; j < out.size(); ++j) out[j] = ToFloat<B>(p[j]);
  });
  return out;
}

// One row: v = p + bias (kBias), pre = v (when pre is set), c = GeLU(v) (kGelu, ops::Gelu's
// kernel: gelu_simd.h) or v, each rounded to Out once. p may be c itself (Out = float): element j
// is read before it is written. `scratch`: n floats for a 16-bit Out with GeLU.
template <typename Out, bool kBias, bool kGelu>
void EpilogueRow(int64_t n, const float* p, const float* bias, Out* c, Out* pre, float* scratch) {
  constexpr bool kInPlace = kGelu && std::is_same_v<Out, float>;
  float* v = kInPlace ? reinterpret_cast<float*>(c) : scratch;
  for (int64_t j = 0; j < n; ++j) {
    const float vj = kBias ? p[j] + bias[j] : p[j];
    if (pre != nullptr) pre[j] = FromFloat<Out>(vj);
    if (kGelu) {
      v[j] = vj;
    } else {
      c[j] = FromFloat<Out>(vj);
    }
  }
  if constexpr (kGelu) {
    internal::GeluTanhRange(v, v, n);
    if constexpr (!kInPlace) {
      for (int64_t j = 0; j < n; ++j) c[j] = FromFloat<Out>(v[j]);
    }
  }
}

// The epilogue over the f32 product p [M, N] (which may be C's own storage when Out = float),
// split over rows on the pool: element-wise, so the result does not depend on the thread count.
template <typename Out>
void ApplyEpilogue(ThreadPool* pool, const GemmShape& s, const GemmOptions& options, const float* p,
                   Out* c, Out* pre) {
  const std::vector<float> bias = WidenedBias(options.bias);
  const bool gelu = options.epilogue == Epilogue::kGelu;
  auto row = bias.empty()
                 ? (gelu ? &EpilogueRow<Out, false, true> : &EpilogueRow<Out, false, false>)
                 : (gelu ? &EpilogueRow<Out, true, true> : &EpilogueRow<Out, true, false>);
  const int64_t n = s.n;
  ParallelFor(pool, s.m, std::max<int64_t>(1, kEpilogueGrain / std::max<int64_t>(1, n)),
              [&](int64_t begin, int64_t end) {
                std::vector<float> scratch(gelu && !std::is_same_v<Out, float> ? n : 0);
                for (int64_t i = begin; i < end; ++i) {
                  row(n, p + i * n, bias.data(), c + i * n, pre == nullptr ? nullptr : pre + i * n,
                      scratch.data());
                }
              });
}

// f32 runs in place; bf16 and f16 are widened to f32 scratch, multiplied with f32 accumulation,
// and rounded back once (or, for an f32 C, written and accumulated in place without rounding).
template <typename T>
void GemmCpu(const ExecContext& ctx, CpuGemmBackend backend, const GemmShape& s,
             const GemmOptions& options, const TensorView& a, const TensorView& b,
             const TensorView& c) {
  const bool epilogue = HasEpilogue(options);
  // An f32 C holds the f32 product, and the epilogue (if any) runs on it in place.
  auto f32_epilogue = [&] {
    if (!epilogue) return;
    float* pc = c.data_as<float>();
    ApplyEpilogue<float>(
        ctx.pool, s, options, pc, pc,
        options.pre_activation == nullptr ? nullptr : options.pre_activation->data_as<float>());
  };
  if constexpr (std::is_same_v<T, float>) {
    GemmF32(backend, s, ctx.num_threads(), options.alpha, a.data_as<float>(), b.data_as<float>(),
            options.beta, c.data_as<float>());
    f32_epilogue();
  } else {
    std::vector<float> a32(a.numel()), b32(b.numel());
    Widen(ctx.pool, a.data_as<T>(), a.numel(), a32.data());
    Widen(ctx.pool, b.data_as<T>(), b.numel(), b32.data());
    if (c.dtype == DType::kF32) {
      GemmF32(backend, s, ctx.num_threads(), options.alpha, a32.data(), b32.data(), options.beta,
              c.data_as<float>());
      f32_epilogue();
      return;
    }
    std::vector<float> c32(c.numel());
    // With beta = 0, C is output only (and may hold NaNs or garbage): do not read it.
    if (options.beta != 0.0f) Widen(ctx.pool, c.data_as<T>(), c.numel(), c32.data());
    GemmF32(backend, s, ctx.num_threads(), options.alpha, a32.data(), b32.data(), options.beta,
            c32.data());
    if (epilogue) {
      ApplyEpilogue<T>(
          ctx.pool, s, options, c32.data(), c.data_as<T>(),
          options.pre_activation == nullptr ? nullptr : options.pre_activation->data_as<T>());
    } else {
      Narrow(ctx.pool, c32.data(), c.numel(), c.data_as<T>());
    }
  }
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

absl::Status Run(const char* op, int rank, const ExecContext& ctx, const TensorView& a,
                 const TensorView& b, const TensorView& c, const GemmOptions& options) {
  ASSIGN_OR_RETURN(GemmShape s, Validate(op, rank, a, b, c, options));
  RETURN_IF_ERROR(ValidateEpilogue(op, rank, s, a, b, c, options));
  MT_ROUTE_DEVICE(op, a, cuda::Gemm(op, ctx, a, b, c, CudaDims(s, options)));
  const CpuGemmBackend backend = Resolve(options.cpu_backend);
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

const char* CpuGemmBackendName(CpuGemmBackend backend) {
  switch (Resolve(backend)) {
    case CpuGemmBackend::kEigen:
      return "eigen";
    case CpuGemmBackend::kOpenBlas:
      return "openblas";
    case CpuGemmBackend::kDefault:
      break;
  }
  LOG(FATAL) << "unresolved CPU GEMM backend";
  return "";
}

}  // namespace ops
}  // namespace mt
