#include "eval/scoring.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "glog/logging.h"

namespace mt {
namespace eval {

namespace {

// Vectors of the GCC/Clang vector extension: the two passes over each row below run on whole
// vectors (GCC leaves scalar loops with selects or float reductions unvectorised without
// -ffast-math, which would change their results).
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));
typedef float F4 __attribute__((vector_size(16)));
typedef double D4 __attribute__((vector_size(32)));
typedef uint64_t U4 __attribute__((vector_size(32)));

template <typename V, typename T>
V Splat(T x) {
  V v;
  for (size_t i = 0; i < sizeof(V) / sizeof(T); ++i) v[i] = x;
  return v;
}

template <typename V>
V Load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// exp(x) in every lane, for x <= 0: relative error below 1e-15 down to -708; below that the
// value is that of -708 (e^-708 ~ 3e-308), which next to the row maximum's term 1 adds nothing.
// x = n ln2 + r with |r| <= ln2 / 2 (ln2 in two parts), exp(r) by its Taylor polynomial of
// degree 12 (truncation below 2^-53 there), 2^n by building the exponent bits: adding 1.5 * 2^52
// rounds x / ln2 to the integer n and leaves it in the low mantissa bits.
D4 ExpNonPositive(D4 x) {
  x = x < Splat<D4>(-708.0) ? Splat<D4>(-708.0) : x;
  const D4 shifter = Splat<D4>(6755399441055744.0);
  const D4 t = x * Splat<D4>(1.4426950408889634) + shifter;
  const D4 n = t - shifter;
  const D4 r =
      (x - n * Splat<D4>(0.693147180369123816490)) - n * Splat<D4>(1.90821492927058770002e-10);
  D4 p = Splat<D4>(1.0 / 479001600.0);
  for (const double c :
       {1.0 / 39916800.0, 1.0 / 3628800.0, 1.0 / 362880.0, 1.0 / 40320.0, 1.0 / 5040.0, 1.0 / 720.0,
        1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0}) {
    p = p * r + Splat<D4>(c);
  }
  U4 bits;
  std::memcpy(&bits, &t, sizeof(bits));
  bits = (bits + 1023) << 52;
  D4 scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}

// The largest of row[0 .. v), or NaN if any is NaN.
float RowMax(const float* row, int64_t v) {
  F8 max = Splat<F8>(-std::numeric_limits<float>::infinity());
  I8 nan = Splat<I8>(0);
  int64_t j = 0;
  for (; j + 8 <= v; j += 8) {
    const F8 x = Load<F8>(row + j);
    max = x > max ? x : max;
    nan |= x != x;
  }
  float m = -std::numeric_limits<float>::infinity();
  bool any_nan = false;
  for (int k = 0; k < 8; ++k) {
    m = max[k] > m ? max[k] : m;
    any_nan |= nan[k] != 0;
  }
  for (; j < v; ++j) {
    m = row[j] > m ? row[j] : m;
    any_nan |= std::isnan(row[j]);
  }
  return any_nan ? std::numeric_limits<float>::quiet_NaN() : m;
}

// sum_j exp(row[j] - max) over row[0 .. v), in double.
double SumExp(const float* row, int64_t v, double max) {
  D4 sum = Splat<D4>(0.0);
  int64_t j = 0;
  for (; j + 4 <= v; j += 4) {
    sum += ExpNonPositive(__builtin_convertvector(Load<F4>(row + j), D4) - Splat<D4>(max));
  }
  double s = (sum[0] + sum[1]) + (sum[2] + sum[3]);
  for (; j < v; ++j) s += std::exp(static_cast<double>(row[j]) - max);
  return s;
}

TokenScore ScoreRow(const float* row, int64_t real_vocab, int32_t target) {
  const float max = RowMax(row, real_vocab);
  TokenScore s;
  if (std::isnan(max)) {
    s.nll = std::nan("");
    return s;
  }
  while (row[s.argmax] != max) ++s.argmax;  // The first maximum.
  // max - logit is exact in double (both are floats); adding the log last keeps large logits
  // from costing the result its low bits.
  s.nll = (max - static_cast<double>(row[target])) + std::log(SumExp(row, real_vocab, max));
  return s;
}

}  // namespace

void ScoreRows(const float* logits, int64_t rows, int64_t stride, int64_t real_vocab,
               const int32_t* targets, ThreadPool* pool, TokenScore* out) {
  CHECK_GE(real_vocab, 1);
  CHECK_GE(stride, real_vocab);
  for (int64_t i = 0; i < rows; ++i) {
    CHECK(targets[i] >= 0 && targets[i] < real_vocab)
        << "target " << targets[i] << " of row " << i << " is outside the vocabulary";
  }
  ParallelFor(pool, rows, /*grain=*/1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      out[i] = ScoreRow(logits + i * stride, real_vocab, targets[i]);
    }
  });
}

}  // namespace eval
}  // namespace mt
