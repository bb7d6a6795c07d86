#include "data/loader/loader.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/indexed/testutil.h"
#include "glog/logging.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

// Sample i is [i * 1000, i * 1000 + 1, ..., i * 1000 + length - 1]: every token says where it
// came from.
class CountingSource : public TokenSampleSource {
 public:
  CountingSource(int64_t n, int64_t length) : n_(n), length_(length) {}
  int64_t num_samples() const override { return n_; }
  int64_t sample_length() const override { return length_; }
  void GetSample(int64_t i, absl::Span<int32_t> out) const override {
    CHECK(i >= 0 && i < n_) << i;
    CHECK_EQ(static_cast<int64_t>(out.size()), length_);
    for (int64_t j = 0; j < length_; ++j) out[j] = static_cast<int32_t>(i * 1000 + j);
    calls_.fetch_add(1);
  }
  int64_t calls() const { return calls_.load(); }

 private:
  int64_t n_;
  int64_t length_;
  mutable std::atomic<int64_t> calls_{0};
};

std::vector<int32_t> Row(const Tensor& t, int64_t b) {
  const int64_t T = t.shape()[1];
  const int32_t* p = t.data_as<int32_t>() + b * T;
  return std::vector<int32_t>(p, p + T);
}

std::vector<MicroBatch> Drain(std::shared_ptr<const TokenSampleSource> source,
                              const LoaderConfig& config) {
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(std::move(source), config);
  std::vector<MicroBatch> out;
  if (!loader.ok()) {
    ADD_FAILURE() << loader.status();
    return out;
  }
  while (std::optional<MicroBatch> b = (*loader)->Next()) out.push_back(std::move(*b));
  EXPECT_FALSE((*loader)->Next().has_value());  // Stays exhausted.
  return out;
}

// Exact equality of two micro-batches: labels, indices and tensor contents.
void ExpectSameBatch(const MicroBatch& a, const MicroBatch& b) {
  EXPECT_EQ(a.iteration, b.iteration);
  EXPECT_EQ(a.micro_step, b.micro_step);
  EXPECT_EQ(a.consumed_samples, b.consumed_samples);
  EXPECT_EQ(a.sample_indices, b.sample_indices);
  ASSERT_EQ(a.inputs.shape(), b.inputs.shape());
  ASSERT_EQ(a.labels.shape(), b.labels.shape());
  for (int64_t r = 0; r < a.inputs.shape()[0]; ++r) {
    EXPECT_EQ(Row(a.inputs, r), Row(b.inputs, r));
    EXPECT_EQ(Row(a.labels, r), Row(b.labels, r));
  }
}

TEST(LoaderTest, DataParallelSlicesAreDisjointAndCoverEachGlobalBatch) {
  for (int64_t dp : {1, 2, 3}) {
    for (int64_t mbs : {1, 2, 5}) {
      for (int64_t accum : {1, 3}) {
        SCOPED_TRACE(absl::StrCat("dp ", dp, " mbs ", mbs, " accum ", accum));
        const int64_t gbs = mbs * dp * accum;
        const int64_t iterations = 7;
        const int64_t L = 6;  // seq_len 5.
        // Plus a partial global batch at the end, which is dropped.
        auto source = std::make_shared<CountingSource>(iterations * gbs + gbs - 1, L);
        std::vector<std::vector<MicroBatch>> per_rank;
        for (int64_t rank = 0; rank < dp; ++rank) {
          LoaderConfig config;
          config.micro_batch_size = mbs;
          config.global_batch_size = gbs;
          config.data_parallel_size = dp;
          config.data_parallel_rank = rank;
          per_rank.push_back(Drain(source, config));
          ASSERT_EQ(static_cast<int64_t>(per_rank.back().size()), iterations * accum);
        }
        for (int64_t it = 0; it < iterations; ++it) {
          std::vector<int64_t> all;
          for (int64_t rank = 0; rank < dp; ++rank) {
            for (int64_t m = 0; m < accum; ++m) {
              const MicroBatch& b = per_rank[rank][it * accum + m];
              EXPECT_EQ(b.iteration, it);
              EXPECT_EQ(b.micro_step, m);
              EXPECT_EQ(b.consumed_samples, it * gbs + (m + 1) * mbs * dp);
              // Megatron's placement: micro-step m of the global batch, this rank's slice of it.
              const int64_t first = it * gbs + m * mbs * dp + rank * mbs;
              ASSERT_EQ(static_cast<int64_t>(b.sample_indices.size()), mbs);
              ASSERT_EQ(b.inputs.shape(), (Shape{mbs, L - 1}));
              ASSERT_EQ(b.labels.shape(), (Shape{mbs, L - 1}));
              for (int64_t r = 0; r < mbs; ++r) {
                EXPECT_EQ(b.sample_indices[r], first + r);
                std::vector<int32_t> in, lab;
                for (int64_t j = 0; j < L - 1; ++j) {
                  in.push_back(static_cast<int32_t>((first + r) * 1000 + j));
                  lab.push_back(static_cast<int32_t>((first + r) * 1000 + j + 1));
                }
                EXPECT_EQ(Row(b.inputs, r), in);
                EXPECT_EQ(Row(b.labels, r), lab);
              }
              all.insert(all.end(), b.sample_indices.begin(), b.sample_indices.end());
            }
          }
          // Disjoint and covering: exactly the global batch's samples, each once.
          std::sort(all.begin(), all.end());
          std::vector<int64_t> expected(gbs);
          for (int64_t i = 0; i < gbs; ++i) expected[i] = it * gbs + i;
          EXPECT_EQ(all, expected) << "iteration " << it;
        }
      }
    }
  }
}

TEST(LoaderTest, ResumingAtSampleKMatchesTheUninterruptedRun) {
  auto source = std::make_shared<CountingSource>(100, 4);
  LoaderConfig config;
  config.micro_batch_size = 2;
  config.data_parallel_size = 2;
  config.global_batch_size = 8;  // Two accumulation steps.
  for (int64_t rank = 0; rank < 2; ++rank) {
    config.data_parallel_rank = rank;
    config.consumed_samples = 0;
    const std::vector<MicroBatch> full = Drain(source, config);
    ASSERT_EQ(full.size(), 24u);  // 12 global batches of 8 (96 samples) x 2 micro-steps.
    // Every micro-step boundary, including mid-global-batch ones and the very end.
    for (int64_t k = 0; k <= 96; k += 4) {
      SCOPED_TRACE(absl::StrCat("rank ", rank, " k ", k));
      config.consumed_samples = k;
      const std::vector<MicroBatch> resumed = Drain(source, config);
      ASSERT_EQ(resumed.size(), full.size() - k / 4);
      for (size_t i = 0; i < resumed.size(); ++i) ExpectSameBatch(resumed[i], full[k / 4 + i]);
    }
  }
}

std::string TestDir(const std::string& name) { return testing::FreshTestDir("loader_" + name); }

TEST(LoaderTest, GptDatasetEndToEndWithResumption) {
  // A real GPT dataset: the loader's rows are its (shuffled) samples, split into inputs/labels.
  const std::string prefix = TestDir("gpt") + "/corpus";
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
        IndexedDatasetWriter::Create(prefix, TokenDType::kU16);
    ASSERT_TRUE(w.ok()) << w.status();
    std::mt19937 gen(3);
    for (int d = 0; d < 40; ++d) {
      std::vector<int32_t> doc(1 + gen() % 30);
      for (int32_t& t : doc) t = static_cast<int32_t>(gen() % 50257);
      ASSERT_TRUE((*w)->AddDocument(doc).ok());
    }
    ASSERT_TRUE((*w)->Finalize().ok());
  }
  absl::StatusOr<std::unique_ptr<IndexedDataset>> data = IndexedDataset::Open(prefix);
  ASSERT_TRUE(data.ok()) << data.status();
  GptDatasetConfig gpt;
  gpt.split = "1";
  gpt.seq_len = 8;
  gpt.num_samples = 64;
  absl::StatusOr<std::unique_ptr<GptDataset>> made = GptDataset::Create(
      std::shared_ptr<const IndexedDataset>(std::move(*data)), Split::kTrain, gpt);
  ASSERT_TRUE(made.ok()) << made.status();
  std::shared_ptr<const GptDataset> dataset(std::move(*made));
  auto source = GptSampleSource(dataset);
  EXPECT_EQ(source->num_samples(), dataset->num_samples());
  EXPECT_EQ(source->sample_length(), 9);

  LoaderConfig config;
  config.micro_batch_size = 3;
  config.data_parallel_size = 2;
  config.global_batch_size = 12;
  for (int64_t rank = 0; rank < 2; ++rank) {
    config.data_parallel_rank = rank;
    config.consumed_samples = 0;
    const std::vector<MicroBatch> full = Drain(source, config);
    ASSERT_EQ(static_cast<int64_t>(full.size()), dataset->num_samples() / 12 * 2);
    for (const MicroBatch& b : full) {
      for (int64_t r = 0; r < 3; ++r) {
        const std::vector<int32_t> s = dataset->Sample(b.sample_indices[r]);
        EXPECT_EQ(Row(b.inputs, r), std::vector<int32_t>(s.begin(), s.end() - 1));
        EXPECT_EQ(Row(b.labels, r), std::vector<int32_t>(s.begin() + 1, s.end()));
      }
    }
    for (int64_t k : {12, 30, 48}) {  // After steps 1 and 4, and mid-step 2.
      config.consumed_samples = k;
      const std::vector<MicroBatch> resumed = Drain(source, config);
      ASSERT_EQ(resumed.size(), full.size() - k / 6);
      for (size_t i = 0; i < resumed.size(); ++i) ExpectSameBatch(resumed[i], full[k / 6 + i]);
    }
  }
}

TEST(LoaderTest, PrefetchDepthDoesNotChangeTheBatches) {
  auto source = std::make_shared<CountingSource>(203, 5);
  LoaderConfig config;
  config.micro_batch_size = 4;
  config.data_parallel_size = 3;
  config.data_parallel_rank = 1;
  config.global_batch_size = 24;
  config.prefetch_depth = 0;
  const std::vector<MicroBatch> inline_batches = Drain(source, config);
  ASSERT_EQ(inline_batches.size(), 16u);  // 8 global batches x 2 micro-steps.
  for (int64_t depth : {1, 2, 7, 100}) {
    SCOPED_TRACE(depth);
    config.prefetch_depth = depth;
    const std::vector<MicroBatch> prefetched = Drain(source, config);
    ASSERT_EQ(prefetched.size(), inline_batches.size());
    for (size_t i = 0; i < prefetched.size(); ++i)
      ExpectSameBatch(prefetched[i], inline_batches[i]);
  }
}

TEST(LoaderTest, PrefetchIsBoundedAndShutsDownCleanly) {
  auto source = std::make_shared<CountingSource>(10000, 3);
  LoaderConfig config;
  config.prefetch_depth = 2;
  {
    // Destroyed without a single Next(): the producer is blocked on the full queue.
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(source, config);
    ASSERT_TRUE(loader.ok());
  }
  {
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(source, config);
    ASSERT_TRUE(loader.ok());
    for (int i = 0; i < 5; ++i) ASSERT_TRUE((*loader)->Next().has_value());
    // Destroyed mid-stream.
  }
  // The queue never ran far ahead: at most the 5 + 2 queued + 1 in hand of each loader, plus
  // the first loader's 3 (2 queued + 1 in hand).
  EXPECT_LE(source->calls(), 3 + 5 + 3);
}

TEST(LoaderTest, ResumingAtTheEndGivesNothing) {
  auto source = std::make_shared<CountingSource>(10, 3);
  LoaderConfig config;
  config.global_batch_size = 4;  // Two complete global batches: samples 0-7.
  config.consumed_samples = 8;
  for (int64_t depth : {0, 2}) {
    config.prefetch_depth = depth;
    EXPECT_TRUE(Drain(source, config).empty());
  }
  config.consumed_samples = 10;  // All samples, including the dropped tail.
  EXPECT_TRUE(Drain(source, config).empty());
  absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(source, config);
  ASSERT_TRUE(loader.ok());
  EXPECT_EQ((*loader)->num_iterations(), 2);
  EXPECT_EQ((*loader)->accumulation_steps(), 4);
}

TEST(LoaderTest, BadConfigsAreInvalidArgument) {
  auto source = std::make_shared<CountingSource>(100, 3);
  const LoaderConfig good = [] {
    LoaderConfig c;
    c.micro_batch_size = 2;
    c.data_parallel_size = 2;
    c.global_batch_size = 8;
    return c;
  }();
  ASSERT_TRUE(Loader::Create(source, good).ok());
  const struct {
    std::function<void(LoaderConfig*)> mutate;
    const char* message;
  } kCases[] = {
      {[](LoaderConfig* c) { c->micro_batch_size = 0; }, "micro_batch_size"},
      {[](LoaderConfig* c) { c->data_parallel_size = 0; }, "data_parallel_size"},
      {[](LoaderConfig* c) { c->data_parallel_rank = 2; }, "data_parallel_rank must be in [0, 2)"},
      {[](LoaderConfig* c) { c->data_parallel_rank = -1; }, "data_parallel_rank"},
      {[](LoaderConfig* c) { c->global_batch_size = 6; }, "global_batch_size 6 must be"},
      {[](LoaderConfig* c) { c->global_batch_size = 0; }, "global_batch_size"},
      {[](LoaderConfig* c) { c->consumed_samples = 6; }, "consumed_samples 6 must be"},
      {[](LoaderConfig* c) { c->consumed_samples = -4; }, "consumed_samples"},
      {[](LoaderConfig* c) { c->prefetch_depth = -1; }, "prefetch_depth"},
      {[](LoaderConfig* c) { c->consumed_samples = 104; }, "exceeds the 100 samples"},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.message);
    LoaderConfig config = good;
    c.mutate(&config);
    absl::StatusOr<std::unique_ptr<Loader>> loader = Loader::Create(source, config);
    ASSERT_FALSE(loader.ok());
    EXPECT_EQ(loader.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(loader.status().message().find(c.message), std::string::npos) << loader.status();
  }
  absl::StatusOr<std::unique_ptr<Loader>> one_token =
      Loader::Create(std::make_shared<CountingSource>(10, 1), LoaderConfig());
  EXPECT_EQ(one_token.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace mt
