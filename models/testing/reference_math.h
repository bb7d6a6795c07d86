// float64 building blocks of the models' independent reference forwards (tests only): plain loops
// over row-major matrices, written without nn/ or core/ops so that they check them.
#ifndef MT_MODELS_TESTING_REFERENCE_MATH_H_
#define MT_MODELS_TESTING_REFERENCE_MATH_H_

#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace mt {
namespace models {
namespace testing {

using Mat = std::vector<double>;  // Row-major.
using ParamMap = std::map<std::string, std::vector<double>>;

inline const Mat& Get(const ParamMap& p, const std::string& name) { return p.at(name); }

// y[n, o] = sum_i x[n, i] w[i, o] + b[o]   (x [N, I], w [I, O], b [O])
inline Mat Linear(const Mat& x, int N, int I, const Mat& w, const Mat& b, int O) {
  Mat y(static_cast<size_t>(N) * O);
  for (int n = 0; n < N; ++n) {
    for (int o = 0; o < O; ++o) {
      double s = b[o];
      for (int i = 0; i < I; ++i) s += x[n * I + i] * w[i * O + o];
      y[n * O + o] = s;
    }
  }
  return y;
}

// LayerNorm over rows of x [N, H] with the biased variance.
inline Mat LayerNorm(const Mat& x, int N, int H, const Mat& g, const Mat& b, double eps) {
  Mat y(static_cast<size_t>(N) * H);
  for (int n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int h = 0; h < H; ++h) mean += x[n * H + h];
    mean /= H;
    for (int h = 0; h < H; ++h) var += (x[n * H + h] - mean) * (x[n * H + h] - mean);
    var /= H;
    const double rstd = 1 / std::sqrt(var + eps);
    for (int h = 0; h < H; ++h) y[n * H + h] = (x[n * H + h] - mean) * rstd * g[h] + b[h];
  }
  return y;
}

// GeLU, tanh approximation (GPT-2 / Megatron).
inline double Gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace testing
}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_TESTING_REFERENCE_MATH_H_
