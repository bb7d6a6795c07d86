#include "core/ops/testutil.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/cuda_device.h"
#include "glog/logging.h"

namespace mt {
namespace testing {

namespace {
double ReadElement(const TensorView& t, int64_t i) {
  switch (t.dtype) {
    case DType::kF32:
      return t.data_as<float>()[i];
    case DType::kBF16:
      return Bf16ToFloat(t.data_as<bf16>()[i]);
    case DType::kF16:
      return HalfToFloat(t.data_as<f16>()[i]);
    case DType::kI32:
      return t.data_as<int32_t>()[i];
    case DType::kI64:
      return static_cast<double>(t.data_as<int64_t>()[i]);
    case DType::kU16:
      return t.data_as<uint16_t>()[i];
  }
  return 0;
}

void WriteElement(const TensorView& t, int64_t i, double v) {
  switch (t.dtype) {
    case DType::kF32:
      t.data_as<float>()[i] = static_cast<float>(v);
      break;
    case DType::kBF16:
      // Round the double directly so that no double rounding via f32 can occur for test data.
      t.data_as<bf16>()[i] = FloatToBf16(static_cast<float>(v));
      break;
    case DType::kF16:
      t.data_as<f16>()[i] = FloatToHalf(static_cast<float>(v));
      break;
    case DType::kI32:
      t.data_as<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DType::kI64:
      t.data_as<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DType::kU16:
      t.data_as<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
  }
}
}  // namespace

Tensor RandomTensor(Shape shape, DType dtype, uint64_t seed, double lo, double hi) {
  Tensor t = Tensor::Host(std::move(shape), dtype);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) WriteElement(t.view(), i, dist(rng));
  return t;
}

Tensor RandomInts(Shape shape, DType dtype, uint64_t seed, int64_t lo, int64_t hi) {
  Tensor t = Tensor::Host(std::move(shape), dtype);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  for (int64_t i = 0; i < t.numel(); ++i) WriteElement(t.view(), i, static_cast<double>(dist(rng)));
  return t;
}

Tensor FromDoubles(Shape shape, DType dtype, const std::vector<double>& values) {
  Tensor t = Tensor::Host(std::move(shape), dtype);
  WriteDoubles(values, t.view());
  return t;
}

Tensor I32(const std::vector<int32_t>& values, Shape shape) {
  Tensor t = Tensor::Host(std::move(shape), DType::kI32);
  CHECK_EQ(static_cast<int64_t>(values.size()), t.numel());
  std::copy(values.begin(), values.end(), t.data_as<int32_t>());
  return t;
}

std::vector<double> ToDoubles(const TensorView& t) {
  CHECK(t.device.is_cpu() && t.IsContiguous()) << t.DebugString();
  std::vector<double> out(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) out[i] = ReadElement(t, i);
  return out;
}

void WriteDoubles(const std::vector<double>& values, const TensorView& t) {
  CHECK(t.device.is_cpu() && t.IsContiguous()) << t.DebugString();
  CHECK_EQ(static_cast<int64_t>(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel(); ++i) WriteElement(t, i, values[i]);
}

double UnitRoundoff(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return std::ldexp(1.0, -24);
    case DType::kBF16:
      return std::ldexp(1.0, -8);
    case DType::kF16:
      return std::ldexp(1.0, -11);
    default:
      return 0.0;
  }
}

::testing::AssertionResult AllClose(const std::vector<double>& actual,
                                    const std::vector<double>& expected, double rtol, double atol) {
  std::vector<double> bound(expected.size());
  for (size_t i = 0; i < expected.size(); ++i) bound[i] = atol + rtol * std::fabs(expected[i]);
  return WithinBounds(actual, expected, bound) << " (rtol " << rtol << ", atol " << atol << ")";
}

::testing::AssertionResult AllClose(const TensorView& actual, const std::vector<double>& expected,
                                    double rtol, double atol) {
  return AllClose(ToDoubles(actual), expected, rtol, atol);
}

::testing::AssertionResult WithinBounds(const std::vector<double>& actual,
                                        const std::vector<double>& expected,
                                        const std::vector<double>& bound) {
  if (actual.size() != expected.size() || actual.size() != bound.size()) {
    return ::testing::AssertionFailure()
           << "sizes differ: " << actual.size() << " actual, " << expected.size() << " expected, "
           << bound.size() << " bounds";
  }
  int64_t bad = 0, worst = -1;
  double worst_ratio = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    if (!(err <= bound[i])) {  // Also catches NaN.
      ++bad;
      const double ratio = std::isnan(err) ? INFINITY : err / bound[i];
      if (worst < 0 || ratio > worst_ratio) {
        worst = static_cast<int64_t>(i);
        worst_ratio = ratio;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements outside their bounds; worst at " << worst
         << ": actual " << actual[worst] << ", expected " << expected[worst] << ", bound "
         << bound[worst];
}

::testing::AssertionResult WithinBounds(const TensorView& actual, const TensorView& expected,
                                        const std::vector<double>& bound) {
  return WithinBounds(ToDoubles(actual), ToDoubles(expected), bound);
}

::testing::AssertionResult SameBits(const TensorView& actual, const TensorView& expected) {
  if (actual.dtype != expected.dtype || actual.shape != expected.shape) {
    return ::testing::AssertionFailure()
           << actual.DebugString() << " vs expected " << expected.DebugString();
  }
  const size_t elem = DTypeSize(actual.dtype);
  const char* a = static_cast<const char*>(actual.data);
  const char* e = static_cast<const char*>(expected.data);
  for (int64_t i = 0; i < actual.numel(); ++i) {
    if (std::memcmp(a + i * elem, e + i * elem, elem) != 0) {
      return ::testing::AssertionFailure() << "element " << i << " of " << actual.numel()
                                           << " differs: " << ReadElement(actual, i)
                                           << " vs expected " << ReadElement(expected, i);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult SameBits(const Tensor& actual, const Tensor& expected) {
  return SameBits(actual.view(), expected.view());
}

::testing::AssertionResult IsError(const absl::Status& status, absl::StatusCode code,
                                   const std::string& substring) {
  if (status.code() == code && absl::StrContains(status.message(), substring)) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected " << absl::StatusCodeToString(code)
                                       << " containing \"" << substring << "\", got " << status;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

Tensor NaNTensor(Shape shape, DType dtype) {
  Tensor t = Tensor::Host(std::move(shape), dtype);
  if (t.nbytes() > 0) std::memset(t.data(), 0xFF, t.nbytes());
  return t;
}

double GeluReference(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

std::vector<double> CrossEntropyReference(const std::vector<double>& logits, int64_t V,
                                          int64_t valid, const std::vector<int64_t>& targets) {
  const int64_t N = static_cast<int64_t>(targets.size());
  std::vector<double> losses(N, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    double mx = -1e300;
    for (int64_t v = 0; v < valid; ++v) mx = std::max(mx, logits[n * V + v]);
    double z = 0;
    for (int64_t v = 0; v < valid; ++v) z += std::exp(logits[n * V + v] - mx);
    losses[n] = std::log(z) + mx - logits[n * V + targets[n]];
  }
  return losses;
}

LayerNormRef LayerNormReference(const std::vector<double>& x, const std::vector<double>& gamma,
                                const std::vector<double>& beta, double eps) {
  const size_t C = gamma.size(), R = x.size() / C;
  LayerNormRef out{std::vector<double>(x.size()), std::vector<double>(R), std::vector<double>(R)};
  for (size_t r = 0; r < R; ++r) {
    double mean = 0, var = 0;
    for (size_t c = 0; c < C; ++c) mean += x[r * C + c];
    mean /= C;
    for (size_t c = 0; c < C; ++c) var += (x[r * C + c] - mean) * (x[r * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (size_t c = 0; c < C; ++c) {
      out.y[r * C + c] = (x[r * C + c] - mean) * rstd * gamma[c] + beta[c];
    }
    out.mean[r] = mean;
    out.rstd[r] = rstd;
  }
  return out;
}

::testing::AssertionResult RejectsFakeCudaViews(const absl::Status& status) {
  if (status.ok()) return ::testing::AssertionFailure() << "accepted host memory labelled cuda:0";
  if (cuda::DeviceCount() == 0 && status.code() != absl::StatusCode::kUnimplemented) {
    return ::testing::AssertionFailure() << "expected Unimplemented without a GPU, got " << status;
  }
  return ::testing::AssertionSuccess();
}

std::vector<double> NumericalGradient(const std::function<double(const std::vector<double>&)>& f,
                                      std::vector<double> x, double h) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

}  // namespace testing
}  // namespace mt
