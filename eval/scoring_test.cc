#include "eval/scoring.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace eval {
namespace {

// -log softmax(row[:v])[target] in long double, summed naively (the reference).
long double ReferenceNll(const std::vector<float>& row, int64_t v, int32_t target) {
  long double sum = 0;
  for (int64_t j = 0; j < v; ++j) sum += std::exp(static_cast<long double>(row[j]));
  return std::log(sum) - row[target];
}

TEST(ScoreRowsTest, HandComputedRowsIgnoreThePadding) {
  // Rows of stride 4 with 3 real tokens; the padding column holds the largest logit.
  const std::vector<float> logits = {1,    2,    3,     100,  //
                                     5,    5,    1,     100,  //
                                     1000, 1000, -1000, 100};
  const std::vector<int32_t> targets = {0, 2, 1};
  std::vector<TokenScore> out(3, {std::nan(""), -1});
  ScoreRows(logits.data(), 3, 4, 3, targets.data(), nullptr, out.data());
  EXPECT_NEAR(out[0].nll, std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0, 1e-15);
  EXPECT_EQ(out[0].argmax, 2);
  EXPECT_NEAR(out[1].nll, std::log(2 * std::exp(5.0) + std::exp(1.0)) - 1.0, 1e-14);
  EXPECT_EQ(out[1].argmax, 0);                    // The lowest index among equal maxima.
  EXPECT_NEAR(out[2].nll, std::log(2.0), 1e-15);  // Max-shifted: no overflow at 1000.
  EXPECT_EQ(out[2].argmax, 0);
}

TEST(ScoreRowsTest, UniformLogitsGiveLogOfTheRealVocabulary) {
  const int64_t v = 50257, stride = 50304;
  std::vector<float> logits(2 * stride, 0.0f);
  const std::vector<int32_t> targets = {0, 50256};
  std::vector<TokenScore> out(2);
  ScoreRows(logits.data(), 2, stride, v, targets.data(), nullptr, out.data());
  for (const TokenScore& s : out) {
    EXPECT_NEAR(s.nll, std::log(50257.0), 1e-12);
    EXPECT_EQ(s.argmax, 0);
  }
}

TEST(ScoreRowsTest, RandomRowsMatchALongDoubleReferenceOnEveryThreadCount) {
  const int64_t rows = 37, v = 1001, stride = 1024;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 4.0f);
  std::vector<float> logits(rows * stride);
  for (float& x : logits) x = normal(rng);
  std::vector<int32_t> targets(rows);
  for (int32_t& t : targets) t = static_cast<int32_t>(rng() % v);
  for (int threads : {1, 3}) {
    ThreadPool pool(threads);
    std::vector<TokenScore> out(rows, {std::nan(""), -1});
    ScoreRows(logits.data(), rows, stride, v, targets.data(), &pool, out.data());
    for (int64_t i = 0; i < rows; ++i) {
      const std::vector<float> row(logits.begin() + i * stride, logits.begin() + (i + 1) * stride);
      // float64 log-sum-exp of ~1000 terms of size <= e^|x|: error a few ulps of the sum's log.
      EXPECT_NEAR(out[i].nll, static_cast<double>(ReferenceNll(row, v, targets[i])), 1e-12);
      int64_t best = 0;
      for (int64_t j = 1; j < v; ++j) best = row[j] > row[best] ? j : best;
      EXPECT_EQ(out[i].argmax, best);
    }
  }
}

// Logits spread over [-1000, 50] and -inf: exponentials from 1 down to far below the smallest
// double, the vector loop's clamping range included, and row lengths off the vector widths.
TEST(ScoreRowsTest, WideRangesMatchTheReference) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> wide(-1000.0f, 50.0f);
  for (int64_t v : {1, 7, 8, 9, 4099}) {
    std::vector<float> row(v);
    for (float& x : row) x = wide(rng);
    if (v > 2) row[1] = -std::numeric_limits<float>::infinity();
    for (int32_t target = 0; target < v; target += std::max<int64_t>(1, v / 5)) {
      if (std::isinf(row[target])) continue;
      TokenScore out{std::nan(""), -1};
      ScoreRows(row.data(), 1, v, v, &target, nullptr, &out);
      EXPECT_NEAR(out.nll, static_cast<double>(ReferenceNll(row, v, target)),
                  1e-12 * std::max(1.0, std::abs(out.nll)))
          << "v " << v << " target " << target;
      EXPECT_EQ(out.argmax, std::max_element(row.begin(), row.end()) - row.begin());
    }
  }
}

TEST(ScoreRowsTest, NanLogitGivesNanLoss) {
  for (int64_t v : {3, 20}) {  // In the scalar tail and in a vector.
    std::vector<float> logits(v, 1.0f);
    logits[v - 2] = std::numeric_limits<float>::quiet_NaN();
    const int32_t target = 0;
    TokenScore out{0.0, -1};
    ScoreRows(logits.data(), 1, v, v, &target, nullptr, &out);
    EXPECT_TRUE(std::isnan(out.nll)) << v;
    EXPECT_EQ(out.argmax, 0);
  }
}

TEST(ScoreRowsDeathTest, TargetOutsideTheRealVocabulary) {
  std::vector<float> logits(8, 0.0f);
  const int32_t target = 6;  // A padding column.
  TokenScore out;
  EXPECT_DEATH(ScoreRows(logits.data(), 1, 8, 6, &target, nullptr, &out), "outside the vocabulary");
}

}  // namespace
}  // namespace eval
}  // namespace mt
