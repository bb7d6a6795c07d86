#include "core/ops/testutil.h"

#include <cmath>
#include <random>

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
                                    const std::vector<double>& expected, double rtol,
                                    double atol) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure()
           << "size " << actual.size() << " != expected size " << expected.size();
  }
  int64_t worst = -1, bad = 0;
  double worst_excess = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double err = std::fabs(actual[i] - expected[i]);
    const double allowed = atol + rtol * std::fabs(expected[i]);
    if (!(err <= allowed)) {  // Also catches NaN.
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - allowed;
      if (worst < 0 || excess > worst_excess) {
        worst = static_cast<int64_t>(i);
        worst_excess = excess;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << actual.size() << " elements differ (rtol " << rtol << ", atol "
         << atol << "); worst at " << worst << ": actual " << actual[worst] << ", expected "
         << expected[worst];
}

::testing::AssertionResult AllClose(const TensorView& actual, const std::vector<double>& expected,
                                    double rtol, double atol) {
  return AllClose(ToDoubles(actual), expected, rtol, atol);
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
