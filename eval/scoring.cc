#include "eval/scoring.h"

#include <cmath>

#include "glog/logging.h"

namespace mt {
namespace eval {

namespace {

TokenScore ScoreRow(const float* row, int64_t real_vocab, int32_t target) {
  int64_t best = 0;
  bool nan = false;
  for (int64_t j = 0; j < real_vocab; ++j) {
    nan |= std::isnan(row[j]);
    if (row[j] > row[best]) best = j;
  }
  const double max = row[best];
  double sum = 0;
  for (int64_t j = 0; j < real_vocab; ++j) sum += std::exp(static_cast<double>(row[j]) - max);
  TokenScore s;
  s.argmax = static_cast<int32_t>(best);
  // max - logit is exact in double (both are floats); adding the log last keeps large logits
  // from costing the result its low bits.
  s.nll = nan ? std::nan("") : (max - static_cast<double>(row[target])) + std::log(sum);
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
    for (int64_t i = begin; i < end; ++i)
      out[i] = ScoreRow(logits + i * stride, real_vocab, targets[i]);
  });
}

}  // namespace eval
}  // namespace mt
