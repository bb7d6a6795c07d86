// Highway compiles this file once per SIMD target (hwy/foreach_target.h re-includes it).
#include "core/ops/gemm_rows_simd.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "core/ops/gemm_rows_simd.cc"
#include "hwy/aligned_allocator.h"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace mt::ops::internal::HWY_NAMESPACE {
namespace hn = ::hwy::HWY_NAMESPACE;

constexpr int64_t kRows = 4;

// Columns [n0, n0 + W) of op(B) as a [K, W] panel (zero beyond N).
void FillPanel(int64_t N, int64_t K, const float* b, bool trans_b, int64_t n0, int64_t W,
               float* panel) {
  for (int64_t j = 0; j < W; ++j) {  // Row n of a transposed B is contiguous: read along it.
    const int64_t n = n0 + j;
    for (int64_t k = 0; k < K; ++k) {
      panel[k * W + j] = n >= N ? 0.0f : (trans_b ? b[n * K + k] : b[k * N + n]);
    }
  }
}

// Rows [m0, m0 + 4) of the zero-padded A times the panel: out [4, W].
void Block(int64_t K, const float* a4, const float* panel, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t L = static_cast<int64_t>(hn::Lanes(d)), W = 2 * L;
  auto c00 = hn::Zero(d), c01 = hn::Zero(d), c10 = hn::Zero(d), c11 = hn::Zero(d);
  auto c20 = hn::Zero(d), c21 = hn::Zero(d), c30 = hn::Zero(d), c31 = hn::Zero(d);
  for (int64_t k = 0; k < K; ++k) {
    const auto p0 = hn::Load(d, panel + k * W), p1 = hn::Load(d, panel + k * W + L);
    const auto x0 = hn::Set(d, a4[k]), x1 = hn::Set(d, a4[K + k]);
    const auto x2 = hn::Set(d, a4[2 * K + k]), x3 = hn::Set(d, a4[3 * K + k]);
    c00 = hn::MulAdd(x0, p0, c00);
    c01 = hn::MulAdd(x0, p1, c01);
    c10 = hn::MulAdd(x1, p0, c10);
    c11 = hn::MulAdd(x1, p1, c11);
    c20 = hn::MulAdd(x2, p0, c20);
    c21 = hn::MulAdd(x2, p1, c21);
    c30 = hn::MulAdd(x3, p0, c30);
    c31 = hn::MulAdd(x3, p1, c31);
  }
  hn::StoreU(c00, d, out);
  hn::StoreU(c01, d, out + L);
  hn::StoreU(c10, d, out + W);
  hn::StoreU(c11, d, out + W + L);
  hn::StoreU(c20, d, out + 2 * W);
  hn::StoreU(c21, d, out + 2 * W + L);
  hn::StoreU(c30, d, out + 3 * W);
  hn::StoreU(c31, d, out + 3 * W + L);
}

void RowInvariantGemmF32(ThreadPool* pool, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* a, const float* b, bool trans_b, float beta, float* c) {
  const hn::ScalableTag<float> d;
  const int64_t W = 2 * static_cast<int64_t>(hn::Lanes(d));
  const int64_t M4 = (M + kRows - 1) / kRows * kRows, panels = (N + W - 1) / W;
  std::vector<float> padded(M4 * K, 0.0f);  // A with zero rows up to a multiple of 4.
  std::copy(a, a + M * K, padded.begin());
  // Enough panels per chunk to amortize a task, few enough to spread over the threads.
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, K));
  ParallelFor(pool, panels, grain, [&](int64_t p0, int64_t p1) {
    auto panel = hwy::AllocateAligned<float>(K * W);
    std::vector<float> out(kRows * W);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t n0 = p * W, width = std::min(W, N - n0);
      FillPanel(N, K, b, trans_b, n0, W, panel.get());
      for (int64_t m0 = 0; m0 < M; m0 += kRows) {
        Block(K, padded.data() + m0 * K, panel.get(), out.data());
        for (int64_t r = 0; r < kRows && m0 + r < M; ++r) {
          float* row = c + (m0 + r) * N + n0;
          for (int64_t j = 0; j < width; ++j) {
            const float v = alpha * out[r * W + j];
            row[j] = beta == 0.0f ? v : v + beta * row[j];
          }
        }
      }
    }
  });
}

}  // namespace mt::ops::internal::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace mt::ops::internal {

HWY_EXPORT(RowInvariantGemmF32);

void RowInvariantGemmF32(ThreadPool* pool, int64_t M, int64_t N, int64_t K, float alpha,
                         const float* a, const float* b, bool trans_b, float beta, float* c) {
  HWY_DYNAMIC_DISPATCH(RowInvariantGemmF32)(pool, M, N, K, alpha, a, b, trans_b, beta, c);
}

}  // namespace mt::ops::internal
#endif  // HWY_ONCE
