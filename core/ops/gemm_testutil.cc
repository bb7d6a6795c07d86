#include "core/ops/gemm_testutil.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace mt {
namespace testing {

using ops::Transpose;

namespace {
Shape MatShape(int64_t batch, int64_t rows, int64_t cols) {
  return batch == 0 ? Shape{rows, cols} : Shape{batch, rows, cols};
}
}  // namespace

std::string GemmCase::ToString() const {
  return absl::StrCat("batch=", batch, " M=", m, " N=", n, " K=", k, " ta=", ta == Transpose::kYes,
                      " tb=", tb == Transpose::kYes, " alpha=", alpha, " beta=", beta,
                      " dtype=", DTypeName(dtype), " c_dtype=", DTypeName(c_dtype),
                      " backend=", ops::CpuGemmBackendName(backend),
                      " threads=", pool == nullptr ? 1 : pool->num_threads());
}

Shape GemmCase::AShape() const {
  return ta == Transpose::kYes ? MatShape(batch, k, m) : MatShape(batch, m, k);
}

Shape GemmCase::BShape() const {
  return tb == Transpose::kYes ? MatShape(batch, n, k) : MatShape(batch, k, n);
}

Shape GemmCase::CShape() const { return MatShape(batch, m, n); }

ops::GemmOptions GemmCase::Options() const {
  ops::GemmOptions options;
  options.transpose_a = ta;
  options.transpose_b = tb;
  options.alpha = alpha;
  options.beta = beta;
  options.cpu_backend = backend;
  return options;
}

GemmReference ReferenceGemm(const GemmCase& cs, const std::vector<double>& a,
                            const std::vector<double>& b, const std::vector<double>& c) {
  const int64_t batches = cs.batch == 0 ? 1 : cs.batch;
  const int64_t m = cs.m, n = cs.n, k = cs.k;
  const bool ta = cs.ta == Transpose::kYes, tb = cs.tb == Transpose::kYes;
  const double alpha = cs.alpha, beta = cs.beta;
  GemmReference ref;
  ref.value.resize(batches * m * n);
  ref.magnitude.resize(batches * m * n);
  for (int64_t bt = 0; bt < batches; ++bt) {
    const double* a_bt = a.data() + bt * m * k;
    const double* b_bt = b.data() + bt * k * n;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0, abs_sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = ta ? a_bt[p * m + i] : a_bt[i * k + p];
          const double y = tb ? b_bt[j * k + p] : b_bt[p * n + j];
          sum += x * y;
          abs_sum += std::fabs(x * y);
        }
        const int64_t idx = (bt * m + i) * n + j;
        ref.value[idx] = alpha * sum + (beta == 0 ? 0.0 : beta * c[idx]);
        ref.magnitude[idx] =
            std::fabs(alpha) * abs_sum + (beta == 0 ? 0.0 : std::fabs(beta * c[idx]));
      }
    }
  }
  return ref;
}

std::vector<std::array<int64_t, 4>> SizeCube(const std::vector<int64_t>& sizes) {
  std::vector<std::array<int64_t, 4>> shapes;
  for (int64_t m : sizes) {
    for (int64_t k : sizes) {
      for (int64_t n : sizes) shapes.push_back({0, m, n, k});
    }
  }
  return shapes;
}

std::vector<GemmCase> TransposeSweep(const GemmCase& base,
                                     const std::vector<std::array<int64_t, 4>>& shapes,
                                     const std::vector<ThreadPool*>& pools, uint64_t first_seed) {
  std::vector<GemmCase> cases;
  for (const auto& shape : shapes) {
    for (ThreadPool* pool : pools) {
      for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
        for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
          GemmCase cs = base;
          cs.batch = shape[0];
          cs.m = shape[1];
          cs.n = shape[2];
          cs.k = shape[3];
          cs.ta = ta;
          cs.tb = tb;
          cs.pool = pool;
          const size_t i = cases.size();
          cs.alpha = kAlphaBeta[i % 4][0];
          cs.beta = kAlphaBeta[i % 4][1];
          cs.seed = first_seed + i;
          cases.push_back(cs);
        }
      }
    }
  }
  return cases;
}

std::string GemmParamName(const ::testing::TestParamInfo<GemmParam>& info) {
  const ops::CpuGemmBackend backend = std::get<1>(info.param);
  return absl::StrCat(
      DTypeName(std::get<0>(info.param)), "_",
      backend == ops::CpuGemmBackend::kDefault ? "default" : ops::CpuGemmBackendName(backend));
}

}  // namespace testing
}  // namespace mt
