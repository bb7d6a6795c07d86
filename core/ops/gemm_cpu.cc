#include "core/ops/gemm_cpu.h"

#include <algorithm>
#include <memory>
#include <type_traits>
#include <vector>

#include "Eigen/Core"
#include "core/openblas.h"
#include "core/ops/dispatch.h"
#include "core/ops/gelu_simd.h"

namespace mt {
namespace ops {
namespace internal {
namespace {

// Elements per chunk when widening/narrowing bf16 and f16 operands on the pool.
constexpr int64_t kConvertGrain = 1 << 16;
// Elements per chunk of the epilogue (whole rows; GeLU's tanh makes elements dearer).
constexpr int64_t kEpilogueGrain = 1 << 14;
// f32 elements of one widened piece (4 MiB: within a last-level cache share, and large enough
// that each piece's product runs at the kernel's full rate).
constexpr int64_t kPieceElements = int64_t{1} << 20;
// Columns of C per thread below which Eigen's product is not split over the pool.
constexpr int64_t kEigenMinColumns = 64;

// One f32 operand with its leading dimension (row-major: elements between rows as stored).
struct F32Matrix {
  const float* data;
  int64_t ld;
};

using RowMajorMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Stride = Eigen::OuterStride<>;

// Eigen's GEMM (single-threaded: no OpenMP here), over column blocks of C on the pool.
void EigenGemm(const ExecContext& ctx, const GemmShape& s, float alpha, F32Matrix a, F32Matrix b,
               float beta, float* c, int64_t ldc) {
  Eigen::Map<const RowMajorMatrix, 0, Stride> a_mat(a.data, s.trans_a ? s.k : s.m,
                                                    s.trans_a ? s.m : s.k, Stride(a.ld));
  Eigen::Map<const RowMajorMatrix, 0, Stride> b_mat(b.data, s.trans_b ? s.n : s.k,
                                                    s.trans_b ? s.k : s.n, Stride(b.ld));
  Eigen::Map<RowMajorMatrix, 0, Stride> c_mat(c, s.m, s.n, Stride(ldc));
  const int64_t blocks =
      std::max<int64_t>(1, std::min<int64_t>(ctx.num_threads(), s.n / kEigenMinColumns));
  ParallelFor(ctx.pool, blocks, 1, [&](int64_t begin, int64_t end) {
    for (int64_t blk = begin; blk < end; ++blk) {
      const int64_t j0 = s.n * blk / blocks, j1 = s.n * (blk + 1) / blocks;
      auto c_blk = c_mat.middleCols(j0, j1 - j0);
      // Transposed maps are free: Eigen's GEMM reads them through the other storage order.
      auto run = [&](const auto& op_a, const auto& op_b) {
        if (beta == 0.0f) {
          c_blk.noalias() = alpha * op_a * op_b;  // Overwrites C: NaNs in it do not propagate.
        } else {
          if (beta != 1.0f) c_blk *= beta;
          c_blk.noalias() += alpha * op_a * op_b;
        }
      };
      if (s.trans_a) {
        if (s.trans_b) {
          run(a_mat.transpose(), b_mat.transpose().middleCols(j0, j1 - j0));
        } else {
          run(a_mat.transpose(), b_mat.middleCols(j0, j1 - j0));
        }
      } else if (s.trans_b) {
        run(a_mat, b_mat.transpose().middleCols(j0, j1 - j0));
      } else {
        run(a_mat, b_mat.middleCols(j0, j1 - j0));
      }
    }
  });
}

// OpenBLAS's Fortran-ABI sgemm, loaded with the CPU's best kernel (core/openblas.h). Debian's
// libopenblas uses 32-bit integers (the 64-bit-index build is libopenblas64).
void OpenBlasGemm(const ExecContext& ctx, const GemmShape& s, float alpha, F32Matrix a, F32Matrix b,
                  float beta, float* c, int64_t ldc) {
  const OpenBlas& blas = LoadOpenBlas();  // The caller checked that it loaded.
  blas.set_num_threads(ctx.num_threads());
  // BLAS is column-major, and a row-major [R, C] buffer is the column-major [C, R] transpose, so
  // row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: pass B first, then A, with
  // their own transpose flags, and the leading dimensions of their row-major rows.
  const char trans_b = s.trans_b ? 'T' : 'N';
  const char trans_a = s.trans_a ? 'T' : 'N';
  const int m = static_cast<int>(s.n);
  const int n = static_cast<int>(s.m);
  const int k = static_cast<int>(s.k);
  const int ld_b = static_cast<int>(std::max<int64_t>(1, b.ld));
  const int ld_a = static_cast<int>(std::max<int64_t>(1, a.ld));
  const int ld_c = static_cast<int>(std::max<int64_t>(1, ldc));
  // BLAS treats beta = 0 as "C is output only", so NaNs in C do not propagate.
  blas.sgemm(&trans_b, &trans_a, &m, &n, &k, &alpha, b.data, &ld_b, a.data, &ld_a, &beta, c, &ld_c);
}

// One product with leading dimensions, on `backend`; M, N, K > 0.
void F32Product(CpuGemmBackend backend, const ExecContext& ctx, const GemmShape& s, float alpha,
                F32Matrix a, F32Matrix b, float beta, float* c, int64_t ldc) {
  if (backend == CpuGemmBackend::kEigen) {
    EigenGemm(ctx, s, alpha, a, b, beta, c, ldc);
  } else {
    OpenBlasGemm(ctx, s, alpha, a, b, beta, c, ldc);
  }
}

// The leading dimension of a contiguous op(X) stored [rows, cols] (transposed: [cols, rows]).
int64_t Ld(int64_t rows, int64_t cols, bool trans) { return trans ? rows : cols; }

// Widens the block rows [r0, r1) x cols [c0, c1) of a row-major source with leading dimension
// `ld` into a contiguous f32 [r1 - r0, c1 - c0], on the pool.
template <typename T>
void WidenBlock(ThreadPool* pool, const T* src, int64_t ld, int64_t r0, int64_t r1, int64_t c0,
                int64_t c1, float* dst) {
  const int64_t w = c1 - c0;
  ParallelFor(pool, r1 - r0, std::max<int64_t>(1, kConvertGrain / std::max<int64_t>(1, w)),
              [&](int64_t begin, int64_t end) {
                for (int64_t i = begin; i < end; ++i) {
                  ToF32(src + (r0 + i) * ld + c0, w, dst + i * w);
                }
              });
}

template <typename T>
constexpr bool kIsF32 = std::is_same_v<T, float>;

// The block rows [r0, r1) x cols [c0, c1) of a row-major operand with leading dimension `ld`, as
// an f32 matrix: the stored block itself for f32, else widened into Scratch(`slot`) (contiguous).
template <typename T>
F32Matrix BlockF32(ThreadPool* pool, const T* src, int64_t ld, int64_t r0, int64_t r1, int64_t c0,
                   int64_t c1, int slot) {
  if constexpr (kIsF32<T>) {
    return {src + r0 * ld + c0, ld};
  } else {
    float* dst = Scratch(slot, (r1 - r0) * (c1 - c0));
    WidenBlock(pool, src, ld, r0, r1, c0, c1, dst);
    return {dst, c1 - c0};
  }
}

}  // namespace

void GemmF32(CpuGemmBackend backend, const ExecContext& ctx, const GemmShape& s, float alpha,
             const float* a, const float* b, float beta, float* c) {
  if (s.m == 0 || s.n == 0) return;
  const int64_t size_a = s.m * s.k, size_b = s.k * s.n, size_c = s.m * s.n;
  if (s.k == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < s.batch * size_c; ++i) c[i] = beta == 0.0f ? 0.0f : beta * c[i];
    return;
  }
  const int64_t lda = Ld(s.m, s.k, s.trans_a), ldb = Ld(s.k, s.n, s.trans_b);
  for (int64_t i = 0; i < s.batch; ++i) {
    F32Product(backend, ctx, s, alpha, {a + i * size_a, lda}, {b + i * size_b, ldb}, beta,
               c + i * size_c, s.n);
  }
}

float* Scratch(int slot, int64_t n) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    int64_t capacity = 0;
  };
  thread_local Buffer buffers[3];
  Buffer& buf = buffers[slot];
  const bool shrink = buf.capacity * 4 > kKeptScratchBytes && n * 4 <= kKeptScratchBytes;
  if (n > buf.capacity || shrink) {
    buf.data.reset();  // Free first: the old and new blocks need not exist at once.
    buf.data.reset(new float[std::max<int64_t>(n, 1)]);  // Uninitialised: written before read.
    buf.capacity = std::max<int64_t>(n, 1);
  }
  return buf.data.get();
}

template <typename TA, typename TB>
void WidenedGemm(CpuGemmBackend backend, const ExecContext& ctx, const GemmShape& s, float alpha,
                 const TA* a, const TB* b, float beta, float* c) {
  if (s.m == 0 || s.n == 0) return;
  // op(A) [M, K] is stored [M, K] (lda K) or [K, M] (lda M); op(B) [K, N] as [K, N] or [N, K].
  const int64_t lda = Ld(s.m, s.k, s.trans_a), ldb = Ld(s.k, s.n, s.trans_b);
  const int64_t rows_a = s.trans_a ? s.k : s.m, cols_a = s.trans_a ? s.m : s.k;
  const int64_t rows_b = s.trans_b ? s.n : s.k, cols_b = s.trans_b ? s.k : s.n;
  // The 16-bit operands' elements: an f32 operand is read where it is stored, never copied.
  const int64_t widened = (kIsF32<TA> ? 0 : s.m * s.k) + (kIsF32<TB> ? 0 : s.k * s.n);
  if (s.k == 0 || alpha == 0.0f || s.batch > 1 || widened <= kPieceElements) {
    // Small or batched: widen whole (attention's batched products are small per entry).
    const F32Matrix a32 = BlockF32(ctx.pool, a, lda, 0, s.batch * rows_a, 0, cols_a, 0);
    const F32Matrix b32 = BlockF32(ctx.pool, b, ldb, 0, s.batch * rows_b, 0, cols_b, 1);
    GemmF32(backend, ctx, s, alpha, a32.data, b32.data, beta, c);
    return;
  }
  const int64_t largest = std::max({s.m, s.n, s.k});
  if (largest == s.n) {  // Pieces of op(B)'s columns; op(A) whole.
    const F32Matrix a32 = BlockF32(ctx.pool, a, lda, 0, rows_a, 0, cols_a, 0);
    const int64_t step = std::max<int64_t>(64, kPieceElements / s.k);
    for (int64_t j0 = 0; j0 < s.n; j0 += step) {
      const int64_t j1 = std::min(s.n, j0 + step);
      GemmShape piece = s;
      piece.n = j1 - j0;
      // Rows of the stored [N, K], or columns of the stored [K, N].
      const F32Matrix b32 = s.trans_b ? BlockF32(ctx.pool, b, ldb, j0, j1, 0, s.k, 1)
                                      : BlockF32(ctx.pool, b, ldb, 0, s.k, j0, j1, 1);
      F32Product(backend, ctx, piece, alpha, a32, b32, beta, c + j0, s.n);
    }
  } else if (largest == s.m) {  // Pieces of op(A)'s rows; op(B) whole.
    const F32Matrix b32 = BlockF32(ctx.pool, b, ldb, 0, rows_b, 0, cols_b, 1);
    const int64_t step = std::max<int64_t>(64, kPieceElements / s.k);
    for (int64_t i0 = 0; i0 < s.m; i0 += step) {
      const int64_t i1 = std::min(s.m, i0 + step);
      GemmShape piece = s;
      piece.m = i1 - i0;
      // Columns of the stored [K, M], or rows of the stored [M, K].
      const F32Matrix a32 = s.trans_a ? BlockF32(ctx.pool, a, lda, 0, s.k, i0, i1, 0)
                                      : BlockF32(ctx.pool, a, lda, i0, i1, 0, s.k, 0);
      F32Product(backend, ctx, piece, alpha, a32, b32, beta, c + i0 * s.n, s.n);
    }
  } else {  // Pieces of K: op(A)[:, k0:k1] op(B)[k0:k1, :], accumulated into C.
    const int64_t step = std::max<int64_t>(256, kPieceElements / (s.m + s.n));
    for (int64_t k0 = 0; k0 < s.k; k0 += step) {
      const int64_t k1 = std::min(s.k, k0 + step);
      GemmShape piece = s;
      piece.k = k1 - k0;
      // Rows of the stored [K, M] or columns of the stored [M, K]; columns of the stored [N, K]
      // or rows of the stored [K, N].
      const F32Matrix a32 = s.trans_a ? BlockF32(ctx.pool, a, lda, k0, k1, 0, s.m, 0)
                                      : BlockF32(ctx.pool, a, lda, 0, s.m, k0, k1, 0);
      const F32Matrix b32 = s.trans_b ? BlockF32(ctx.pool, b, ldb, 0, s.n, k0, k1, 1)
                                      : BlockF32(ctx.pool, b, ldb, k0, k1, 0, s.n, 1);
      F32Product(backend, ctx, piece, alpha, a32, b32, k0 == 0 ? beta : 1.0f, c, s.n);
    }
  }
}

template <typename T>
void Widen(ThreadPool* pool, const T* src, int64_t n, float* dst) {
  ParallelFor(pool, n, kConvertGrain,
              [&](int64_t begin, int64_t end) { ToF32(src + begin, end - begin, dst + begin); });
}

template <typename T>
void Narrow(ThreadPool* pool, const float* src, int64_t n, T* dst) {
  ParallelFor(pool, n, kConvertGrain,
              [&](int64_t begin, int64_t end) { FromF32(src + begin, end - begin, dst + begin); });
}

std::vector<float> WidenedBias(const TensorView* bias) {
  std::vector<float> out;
  if (bias == nullptr) return out;
  out.resize(bias->numel());
  DispatchFloat(bias->dtype, [&](auto tag) {
    using B = decltype(tag);
    ToF32(bias->data_as<B>(), bias->numel(), out.data());
  });
  return out;
}

namespace {

// One row: v = p + bias (kBias), pre = v (when pre is set), c = GeLU(v) (kGelu, ops::Gelu's
// kernel: gelu_simd.h) or v, each rounded to Out once. p may be c itself (Out = float): element j
// is read before it is written. `scratch`: n floats for a 16-bit Out, where v is formed in f32
// and then rounded by the SIMD conversion (FromF32: the bits of FromFloat).
template <typename Out, bool kBias, bool kGelu>
void EpilogueRow(int64_t n, const float* p, const float* bias, Out* c, Out* pre, float* scratch) {
  if constexpr (std::is_same_v<Out, float>) {
    for (int64_t j = 0; j < n; ++j) {
      const float vj = kBias ? p[j] + bias[j] : p[j];
      if (pre != nullptr) pre[j] = vj;
      c[j] = vj;
    }
    if constexpr (kGelu) GeluTanhRange(c, c, n);
  } else {
    for (int64_t j = 0; j < n; ++j) scratch[j] = kBias ? p[j] + bias[j] : p[j];
    if (pre != nullptr) FromF32(scratch, n, pre);
    if constexpr (kGelu) GeluTanhRange(scratch, scratch, n);
    FromF32(scratch, n, c);
  }
}

}  // namespace

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
                std::vector<float> scratch(std::is_same_v<Out, float> ? 0 : n);
                for (int64_t i = begin; i < end; ++i) {
                  row(n, p + i * n, bias.data(), c + i * n, pre == nullptr ? nullptr : pre + i * n,
                      scratch.data());
                }
              });
}

#define MT_GEMM_CPU_INSTANTIATE(T)                                                                 \
  template void WidenedGemm<T, T>(CpuGemmBackend, const ExecContext&, const GemmShape&, float,     \
                                  const T*, const T*, float, float*);                              \
  template void WidenedGemm<T, float>(CpuGemmBackend, const ExecContext&, const GemmShape&, float, \
                                      const T*, const float*, float, float*);                      \
  template void WidenedGemm<float, T>(CpuGemmBackend, const ExecContext&, const GemmShape&, float, \
                                      const float*, const T*, float, float*);                      \
  template void Widen<T>(ThreadPool*, const T*, int64_t, float*);                                  \
  template void Narrow<T>(ThreadPool*, const float*, int64_t, T*);                                 \
  template void ApplyEpilogue<T>(ThreadPool*, const GemmShape&, const GemmOptions&, const float*,  \
                                 T*, T*);
MT_GEMM_CPU_INSTANTIATE(bf16)
MT_GEMM_CPU_INSTANTIATE(f16)
template void ApplyEpilogue<float>(ThreadPool*, const GemmShape&, const GemmOptions&, const float*,
                                   float*, float*);
#undef MT_GEMM_CPU_INSTANTIATE

}  // namespace internal
}  // namespace ops
}  // namespace mt
