#include "data/loader/blending.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

TEST(ParseDataPathTest, OnePrefixOrWeightedPairs) {
  auto one = ParseDataPath("/data/corpus_text_document");
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_EQ(one->size(), 1u);
  EXPECT_EQ((*one)[0].prefix, "/data/corpus_text_document");
  EXPECT_EQ((*one)[0].weight, 1.0);

  auto two = ParseDataPath("  0.3 A\t1.2  B ");  // Normalised: 0.2 and 0.8.
  ASSERT_TRUE(two.ok()) << two.status();
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[0].prefix, "A");
  EXPECT_EQ((*two)[1].prefix, "B");
  EXPECT_NEAR((*two)[0].weight, 0.2, 1e-15);
  EXPECT_NEAR((*two)[1].weight, 0.8, 1e-15);
}

TEST(ParseDataPathTest, RefusesMalformedValues) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"", "--data_path is empty"},
      {"0.5 A 0.5", "pairs of weight and prefix, got 3 words"},
      {"x A 1 B", "weight 'x' (before 'A') must be a number > 0"},
      {"0 A 1 B", "weight '0' (before 'A')"},
      {"1 A -2 B", "weight '-2' (before 'B')"},
      {"nan A 1 B", "weight 'nan'"},
      {"inf A 1 B", "weight 'inf'"},
  };
  for (const auto& [value, message] : bad) {
    auto parsed = ParseDataPath(value);
    ASSERT_FALSE(parsed.ok()) << value;
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_NE(parsed.status().message().find(message), absl::string_view::npos)
        << value << ": " << parsed.status();
  }
}

TEST(BlendingIndexTest, HandComputedOrder) {
  // Weights 0.3 / 0.7 over 10 samples, worked by hand from the rule in blending.h: at sample i
  // the errors are 0.3 max(i,1) - taken[0] and 0.7 max(i,1) - taken[1]; the larger one wins.
  const BlendingIndex index({3, 7}, 10);
  const std::vector<int> dataset = {1, 0, 1, 1, 0, 1, 1, 0, 1, 1};
  const std::vector<int64_t> sample = {0, 0, 1, 2, 1, 3, 4, 2, 5, 6};
  ASSERT_EQ(index.num_samples(), 10);
  for (int64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(index.dataset(i), dataset[i]) << i;
    EXPECT_EQ(index.dataset_sample(i), sample[i]) << i;
  }
  EXPECT_EQ(index.samples_needed(0), 4);  // ceil(1.005 * 0.3 * 10) = ceil(3.015)
  EXPECT_EQ(index.samples_needed(1), 8);  // ceil(7.035)
}

TEST(BlendingIndexTest, EveryPrefixFollowsTheWeights) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0.05, 1.0);
  for (int trial = 0; trial < 20; ++trial) {
    const int n = 1 + trial % 5;
    std::vector<double> w(n);
    double sum = 0;
    for (double& x : w) sum += (x = u(rng));
    const int64_t total = 500 + 37 * trial;
    const BlendingIndex index(w, total);
    std::vector<int64_t> taken(n, 0);
    for (int64_t i = 0; i < total; ++i) {
      const int d = index.dataset(i);
      ASSERT_GE(d, 0);
      ASSERT_LT(d, n);
      ASSERT_EQ(index.dataset_sample(i), taken[d]) << "each dataset's samples in order";
      ++taken[d];
      for (int e = 0; e < n; ++e) {
        // Within two samples of the weight's share after every prefix (the rule weighs sample i
        // by max(i, 1), one behind; 1.36 is the largest gap seen over 3,000 random blends).
        ASSERT_LE(std::abs(static_cast<double>(taken[e]) - w[e] / sum * (i + 1)), 2.0)
            << "trial " << trial << " dataset " << e << " after " << i + 1;
      }
    }
    for (int d = 0; d < n; ++d) {
      EXPECT_GE(index.samples_needed(d), taken[d]);
      EXPECT_EQ(index.samples_needed(d),
                std::max<int64_t>(taken[d], std::ceil(1.005 * w[d] / sum * total)));
    }
  }
}

// Sample j of source d: every token is d * 1000 + j.
class Numbered : public TokenSampleSource {
 public:
  Numbered(int d, int64_t n, int64_t length) : d_(d), n_(n), length_(length) {}
  int64_t num_samples() const override { return n_; }
  int64_t sample_length() const override { return length_; }
  void GetSample(int64_t j, absl::Span<int32_t> out) const override {
    for (int32_t& t : out) t = static_cast<int32_t>(d_ * 1000 + j);
  }

 private:
  int d_;
  int64_t n_, length_;
};

class NumberedBert : public BertSampleSource {
 public:
  NumberedBert(int d, int64_t n, int64_t seq_len) : d_(d), n_(n), seq_len_(seq_len) {}
  int64_t num_samples() const override { return n_; }
  int64_t seq_len() const override { return seq_len_; }
  void GetSample(int64_t j, BertSample* out) const override {
    out->tokens.assign(seq_len_, static_cast<int32_t>(d_ * 1000 + j));
    out->sop_label = d_;
  }

 private:
  int d_;
  int64_t n_, seq_len_;
};

TEST(BlendTest, SamplesComeFromTheIndexedSources) {
  auto index = std::make_shared<const BlendingIndex>(std::vector<double>{3, 7}, 10);
  auto tokens = BlendSources(
      {std::make_shared<Numbered>(0, 4, 5), std::make_shared<Numbered>(1, 8, 5)}, index);
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ((*tokens)->num_samples(), 10);
  EXPECT_EQ((*tokens)->sample_length(), 5);
  auto bert = BlendSources(
      {std::make_shared<NumberedBert>(0, 4, 6), std::make_shared<NumberedBert>(1, 9, 6)}, index);
  ASSERT_TRUE(bert.ok()) << bert.status();
  EXPECT_EQ((*bert)->num_samples(), 10);
  EXPECT_EQ((*bert)->seq_len(), 6);
  std::vector<int32_t> out(5);
  BertSample s;
  for (int64_t i = 0; i < 10; ++i) {
    const int32_t want = index->dataset(i) * 1000 + static_cast<int32_t>(index->dataset_sample(i));
    (*tokens)->GetSample(i, absl::MakeSpan(out));
    EXPECT_EQ(out, std::vector<int32_t>(5, want)) << i;
    (*bert)->GetSample(i, &s);
    EXPECT_EQ(s.tokens, std::vector<int32_t>(6, want)) << i;
    EXPECT_EQ(s.sop_label, index->dataset(i));
  }
}

TEST(BlendTest, RefusesSourcesThatDoNotFit) {
  auto index = std::make_shared<const BlendingIndex>(std::vector<double>{3, 7}, 10);
  auto Code = [&](std::vector<std::shared_ptr<const TokenSampleSource>> sources,
                  const std::string& message) {
    auto blended = BlendSources(std::move(sources), index);
    EXPECT_FALSE(blended.ok());
    EXPECT_NE(blended.status().message().find(message), absl::string_view::npos)
        << blended.status();
  };
  Code({std::make_shared<Numbered>(0, 4, 5)}, "1 sources for an index of 2 datasets");
  Code({std::make_shared<Numbered>(0, 3, 5), std::make_shared<Numbered>(1, 8, 5)},
       "dataset 0 holds 3 samples, the blend needs 4");
  Code({std::make_shared<Numbered>(0, 4, 5), std::make_shared<Numbered>(1, 8, 6)},
       "dataset 1's samples have 6 tokens, dataset 0's 5");
  Code({std::make_shared<Numbered>(0, 4, 5), nullptr}, "a source is null");
  EXPECT_FALSE(BlendSources({std::make_shared<Numbered>(0, 4, 5)}, nullptr).ok());
}

}  // namespace
}  // namespace data
}  // namespace mt
