#include "data/gpt_dataset/gpt_dataset.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "core/status_testutil.h"
#include "data/indexed/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

using Doc = std::vector<std::vector<int32_t>>;  // A document: its sequences.

std::string TestDir(const std::string& name) { return testing::FreshTestDir("gpt_" + name); }

void WriteDataset(const std::string& prefix, const std::vector<Doc>& docs,
                  TokenDType dtype = TokenDType::kU16) {
  absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
      IndexedDatasetWriter::Create(prefix, dtype);
  ASSERT_TRUE(w.ok()) << w.status();
  for (const Doc& doc : docs) {
    for (const auto& seq : doc) ASSERT_TRUE((*w)->AddSequence(seq).ok());
    ASSERT_TRUE((*w)->EndDocument().ok());
  }
  ASSERT_TRUE((*w)->Finalize().ok());
}

absl::StatusOr<std::shared_ptr<const IndexedDataset>> Open(const std::string& prefix) {
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> ds, IndexedDataset::Open(prefix));
  return std::shared_ptr<const IndexedDataset>(std::move(ds));
}

// GptDataset::Create on the dataset at `prefix`.
absl::StatusOr<std::unique_ptr<GptDataset>> OpenGpt(const std::string& prefix, Split split,
                                                    const GptDatasetConfig& config) {
  ASSIGN_OR_RETURN(std::shared_ptr<const IndexedDataset> data, Open(prefix));
  return GptDataset::Create(std::move(data), split, config);
}

std::vector<int64_t> ToVector(absl::Span<const int64_t> s) { return {s.begin(), s.end()}; }

// The tiny dataset: documents of 5, 3 and 7 tokens.
const std::vector<Doc> kTiny = {
    {{10, 11, 12, 13, 14}},
    {{20, 21, 22}},
    {{30, 31, 32, 33, 34, 35, 36}},
};

// kTiny as one training split of 4-token samples (split "1", seq_len 4, seed 1234).
GptDatasetConfig TinyConfig(int64_t num_samples) {
  GptDatasetConfig config;
  config.split = "1";
  config.seq_len = 4;
  config.num_samples = num_samples;
  config.seed = 1234;
  return config;
}

// ---------------------------------------------------------------------------------------------
// Split

TEST(SplitDocumentsTest, FollowsMegatronsRounding) {
  const struct {
    const char* split;
    int64_t n;
    std::array<int64_t, 4> expected;
  } kCases[] = {
      {"969,30,1", 1000, {0, 969, 999, 1000}},
      {"969, 30, 1", 10, {0, 10, 10, 10}},  // 9.69 -> 10, 0.3 -> 0, 0.01 -> 0.
      {"1", 7, {0, 7, 7, 7}},
      {"8/1/1", 10, {0, 8, 9, 10}},
      {"1,1,1", 3, {0, 1, 2, 3}},
      // 1.5 rounds to 2 twice: boundaries 0,2,4,4, excess 1 subtracted from the last three.
      {"1,1", 3, {0, 1, 3, 3}},
      // 2.5 rounds half to even (2) twice: 0,2,4,4, deficit 1 added.
      {"1,1", 5, {0, 3, 5, 5}},
      // 1/3 rounds to 0 three times: 0,0,0,0 -> 0,1,1,1.
      {"1,1,1", 1, {0, 1, 1, 1}},
      {"0,0,5", 4, {0, 0, 0, 4}},
      {"1,2", 0, {0, 0, 0, 0}},
  };
  for (const auto& c : kCases) {
    SCOPED_TRACE(absl::StrCat(c.split, " n=", c.n));
    absl::StatusOr<std::array<int64_t, 4>> b = SplitDocuments(c.split, c.n);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(*b, c.expected);
  }
}

TEST(SplitDocumentsTest, RejectsBadSplitStrings) {
  for (const char* bad : {"", "a,b", "1,,2", "-1,2", "1,1,1,1", "0,0,0", "nan", "inf,1"}) {
    SCOPED_TRACE(bad);
    absl::StatusOr<std::array<int64_t, 4>> b = SplitDocuments(bad, 10);
    ASSERT_FALSE(b.ok());
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(b.status().message().find(absl::StrCat("split \"", bad, "\"")), std::string::npos)
        << b.status();
  }
}

// ---------------------------------------------------------------------------------------------
// Exact samples, computed by hand.

TEST(GptDatasetTest, SingleDocumentSplitsByHand) {
  const std::string dir = TestDir("single");
  WriteDataset(dir + "/tiny", kTiny);
  ASSERT_OK_AND_ASSIGN(auto data, Open(dir + "/tiny"));
  GptDatasetConfig config;
  config.split = "1,1,1";  // train = doc 0, valid = doc 1, test = doc 2.
  config.seq_len = 4;

  // test: document 2 (7 tokens). One sample needs 5 tokens: one epoch, (7 - 1) / 4 = 1 sample.
  config.num_samples = 1;
  ASSERT_OK_AND_ASSIGN(auto test, GptDataset::Create(data, Split::kTest, config));
  EXPECT_EQ(test->document_begin(), 2);
  EXPECT_EQ(test->document_end(), 3);
  EXPECT_EQ(test->num_epochs(), 1);
  ASSERT_EQ(test->num_samples(), 1);
  EXPECT_EQ(test->Sample(0), (std::vector<int32_t>{30, 31, 32, 33, 34}));

  // Two samples need 9 tokens: two epochs (14 tokens), (14 - 1) / 4 = 3 samples over the stream
  // 30..36 30..36, each starting where the last one ended.
  config.num_samples = 2;
  ASSERT_OK_AND_ASSIGN(test, GptDataset::Create(data, Split::kTest, config));
  EXPECT_EQ(test->num_epochs(), 2);
  ASSERT_EQ(test->num_samples(), 3);
  EXPECT_EQ(ToVector(test->document_index()), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ToVector(test->sample_index()), (std::vector<int64_t>{0, 0, 0, 4, 1, 1, 1, 5}));
  const std::vector<std::vector<int32_t>> unshuffled = {
      {30, 31, 32, 33, 34}, {34, 35, 36, 30, 31}, {31, 32, 33, 34, 35}};
  std::vector<int64_t> perm = ToVector(test->shuffle_index());
  std::sort(perm.begin(), perm.end());
  EXPECT_EQ(perm, (std::vector<int64_t>{0, 1, 2}));
  for (int64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(test->Sample(i), unshuffled[test->shuffle_index()[i]]) << i;
  }

  // valid: document 1 (3 tokens). Two samples need 9 tokens: three epochs, (9 - 1) / 4 = 2.
  ASSERT_OK_AND_ASSIGN(auto valid, GptDataset::Create(data, Split::kValid, config));
  EXPECT_EQ(valid->num_epochs(), 3);
  ASSERT_EQ(valid->num_samples(), 2);
  const std::vector<std::vector<int32_t>> valid_samples = {{20, 21, 22, 20, 21},
                                                           {21, 22, 20, 21, 22}};
  for (int64_t i = 0; i < 2; ++i) {
    EXPECT_EQ(valid->Sample(i), valid_samples[valid->shuffle_index()[i]]) << i;
  }
}

// The documented RNG, written out again: std::mt19937_64(seed), rejection-sampled bounded
// integers, Fisher-Yates from the back; documents first, then samples.
std::vector<int64_t> RefShuffle(std::vector<int64_t> v, std::mt19937_64* rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const uint64_t n = i;
    uint64_t r;
    do {
      r = (*rng)();
    } while (r < (0 - n) % n);
    std::swap(v[i - 1], v[r % n]);
  }
  return v;
}

TEST(GptDatasetTest, ThreeDocumentsOneEpochByHand) {
  const std::string prefix = TestDir("one_epoch") + "/tiny";
  WriteDataset(prefix, kTiny);
  ASSERT_OK_AND_ASSIGN(auto ds, OpenGpt(prefix, Split::kTrain, TinyConfig(3)));
  EXPECT_EQ(ds->num_epochs(), 1);  // (15 - 1) / 4 = 3 samples from one epoch.
  ASSERT_EQ(ds->num_samples(), 3);
  // Seed 1234 orders the documents 1, 0, 2 and the samples 1, 0, 2.
  std::mt19937_64 rng(1234);
  EXPECT_EQ(RefShuffle({0, 1, 2}, &rng), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(RefShuffle({0, 1, 2}, &rng), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(ToVector(ds->document_index()), (std::vector<int64_t>{1, 0, 2}));
  EXPECT_EQ(ToVector(ds->shuffle_index()), (std::vector<int64_t>{1, 0, 2}));
  // Stream: 20 21 22 | 10 11 12 13 14 | 30 31 32 33 34 35 36. Samples start at tokens 0, 4, 8:
  // (doc position 0, offset 0), (1, 1), (2, 0); the last ends at (2, 4).
  EXPECT_EQ(ToVector(ds->sample_index()), (std::vector<int64_t>{0, 0, 1, 1, 2, 0, 2, 4}));
  EXPECT_EQ(ds->Sample(0), (std::vector<int32_t>{11, 12, 13, 14, 30}));  // Stream sample 1.
  EXPECT_EQ(ds->Sample(1), (std::vector<int32_t>{20, 21, 22, 10, 11}));  // Stream sample 0.
  EXPECT_EQ(ds->Sample(2), (std::vector<int32_t>{30, 31, 32, 33, 34}));  // Stream sample 2.
}

TEST(GptDatasetTest, ThreeDocumentsTwoEpochsByHand) {
  const std::string prefix = TestDir("two_epochs") + "/tiny";
  WriteDataset(prefix, kTiny);
  // 5 samples need 21 tokens: two epochs (30 tokens), (30 - 1) / 4 = 7 samples.
  ASSERT_OK_AND_ASSIGN(auto ds, OpenGpt(prefix, Split::kTrain, TinyConfig(5)));
  EXPECT_EQ(ds->num_epochs(), 2);
  ASSERT_EQ(ds->num_samples(), 7);
  std::mt19937_64 rng(1234);
  EXPECT_EQ(RefShuffle({0, 1, 2, 0, 1, 2}, &rng), (std::vector<int64_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(RefShuffle({0, 1, 2, 3, 4, 5, 6}, &rng), (std::vector<int64_t>{3, 0, 4, 1, 2, 5, 6}));
  EXPECT_EQ(ToVector(ds->document_index()), (std::vector<int64_t>{0, 1, 1, 2, 0, 2}));
  EXPECT_EQ(ToVector(ds->shuffle_index()), (std::vector<int64_t>{3, 0, 4, 1, 2, 5, 6}));
  // Stream (positions): doc0 10..14 (0-4), doc1 20..22 (5-7), doc1 (8-10), doc2 30..36 (11-17),
  // doc0 (18-22), doc2 (23-29). Sample k covers positions 4k..4k+4. A sample ending on a
  // document's last token records that token, (0, 4), not the next document's first.
  EXPECT_EQ(ToVector(ds->sample_index()),
            (std::vector<int64_t>{0, 0, 0, 4, 2, 0, 3, 1, 3, 5, 4, 2, 5, 1, 5, 5}));
  const std::vector<std::vector<int32_t>> stream_samples = {
      {10, 11, 12, 13, 14}, {14, 20, 21, 22, 20}, {20, 21, 22, 30, 31}, {31, 32, 33, 34, 35},
      {35, 36, 10, 11, 12}, {12, 13, 14, 30, 31}, {31, 32, 33, 34, 35},
  };
  const int order[] = {3, 0, 4, 1, 2, 5, 6};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(ds->Sample(i), stream_samples[order[i]]) << i;
}

// ---------------------------------------------------------------------------------------------
// A sweep against the reference definition: the documents in document_index order form a stream,
// and sample i is stream[k * seq_len, k * seq_len + seq_len] with k = shuffle_index[i].

TEST(GptDatasetTest, MatchesTheStreamDefinitionOnRandomDatasets) {
  const std::string dir = TestDir("sweep");
  std::mt19937 gen(7);
  for (int trial = 0; trial < 6; ++trial) {
    // Documents of 0..40 tokens, some of several sequences, u16 or i32 tokens.
    const int num_docs = 1 + static_cast<int>(gen() % 30);
    std::vector<Doc> docs(num_docs);
    for (Doc& doc : docs) {
      const int num_seqs = static_cast<int>(gen() % 3);
      for (int s = 0; s < num_seqs; ++s) {
        std::vector<int32_t> seq(gen() % 20);
        for (int32_t& t : seq) t = static_cast<int32_t>(gen() % 60000);
        doc.push_back(seq);
      }
    }
    docs[0].push_back({1, 2, 3});  // At least some tokens in the train split.
    const TokenDType dtype = trial % 2 == 0 ? TokenDType::kU16 : TokenDType::kI32;
    const std::string prefix = absl::StrCat(dir, "/d", trial);
    WriteDataset(prefix, docs, dtype);
    ASSERT_OK_AND_ASSIGN(auto data, Open(prefix));
    for (int64_t seq_len : {1, 2, 3, 7, 16}) {
      for (int64_t requested : {1, 5, 40}) {
        SCOPED_TRACE(absl::StrCat("trial ", trial, " seq_len ", seq_len, " requested ", requested));
        GptDatasetConfig config;
        config.split = "98,2";
        config.seq_len = seq_len;
        config.num_samples = requested;
        config.seed = 100 + trial;
        config.cache_dir = dir;
        absl::StatusOr<std::unique_ptr<GptDataset>> made =
            GptDataset::Create(data, Split::kTrain, config);
        ASSERT_TRUE(made.ok()) << made.status();
        const GptDataset& ds = **made;
        std::vector<int32_t> lengths;
        int64_t tokens_per_epoch = 0;
        for (int64_t d = ds.document_begin(); d < ds.document_end(); ++d) {
          int64_t len = 0;
          for (const auto& seq : docs[d]) len += static_cast<int64_t>(seq.size());
          tokens_per_epoch += len;
        }
        // num_epochs is the smallest that suffices.
        const int64_t e = ds.num_epochs();
        EXPECT_GE((e * tokens_per_epoch - 1) / seq_len, requested);
        EXPECT_LT(((e - 1) * tokens_per_epoch - 1) / seq_len, requested);
        ASSERT_EQ(ds.num_samples(), (e * tokens_per_epoch - 1) / seq_len);
        // document_index: each split document exactly e times.
        std::map<int64_t, int64_t> counts;
        for (int64_t d : ds.document_index()) ++counts[d];
        ASSERT_EQ(static_cast<int64_t>(counts.size()), ds.document_end() - ds.document_begin());
        for (const auto& [d, c] : counts) {
          EXPECT_GE(d, ds.document_begin());
          EXPECT_LT(d, ds.document_end());
          EXPECT_EQ(c, e);
        }
        // shuffle_index: a permutation.
        std::vector<int64_t> perm = ToVector(ds.shuffle_index());
        std::sort(perm.begin(), perm.end());
        for (int64_t i = 0; i < ds.num_samples(); ++i) ASSERT_EQ(perm[i], i);
        // The stream; row k of sample_index must point at stream position k * seq_len.
        std::vector<int32_t> stream;
        std::vector<int64_t> start;  // Stream position of each document_index entry.
        for (int64_t d : ds.document_index()) {
          start.push_back(static_cast<int64_t>(stream.size()));
          for (const auto& seq : docs[d]) stream.insert(stream.end(), seq.begin(), seq.end());
        }
        for (int64_t k = 0; k <= ds.num_samples(); ++k) {
          const int64_t pos = ds.sample_index()[2 * k];
          const int64_t offset = ds.sample_index()[2 * k + 1];
          ASSERT_EQ(start[pos] + offset, k * seq_len) << "row " << k;
        }
        for (int64_t i = 0; i < ds.num_samples(); ++i) {
          const int64_t k = ds.shuffle_index()[i];
          const std::vector<int32_t> expected(stream.begin() + k * seq_len,
                                              stream.begin() + k * seq_len + seq_len + 1);
          ASSERT_EQ(ds.Sample(i), expected) << "sample " << i;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Determinism and the cache.

TEST(GptDatasetTest, DeterministicForASeed) {
  const std::string dir = TestDir("determinism");
  std::vector<Doc> docs;
  for (int d = 0; d < 50; ++d) docs.push_back({std::vector<int32_t>(1 + d % 7, d)});
  WriteDataset(dir + "/d", docs);
  ASSERT_OK_AND_ASSIGN(auto data, Open(dir + "/d"));
  GptDatasetConfig config;
  config.split = "1";
  config.seq_len = 8;
  config.num_samples = 60;
  ::mkdir((dir + "/a").c_str(), 0755);
  ::mkdir((dir + "/b").c_str(), 0755);
  config.cache_dir = dir + "/a";
  ASSERT_OK_AND_ASSIGN(auto a, GptDataset::Create(data, Split::kTrain, config));
  config.cache_dir = dir + "/b";
  ASSERT_OK_AND_ASSIGN(auto b, GptDataset::Create(data, Split::kTrain, config));
  ASSERT_EQ(a->index_source(), IndexSource::kBuilt);
  ASSERT_EQ(b->index_source(), IndexSource::kBuilt);  // Built twice, independently.
  EXPECT_EQ(ToVector(a->document_index()), ToVector(b->document_index()));
  EXPECT_EQ(ToVector(a->sample_index()), ToVector(b->sample_index()));
  EXPECT_EQ(ToVector(a->shuffle_index()), ToVector(b->shuffle_index()));
  for (int64_t i = 0; i < a->num_samples(); ++i) EXPECT_EQ(a->Sample(i), b->Sample(i));

  config.seed = 4321;
  ASSERT_OK_AND_ASSIGN(auto c, GptDataset::Create(data, Split::kTrain, config));
  EXPECT_NE(ToVector(a->document_index()), ToVector(c->document_index()));
  EXPECT_NE(ToVector(a->shuffle_index()), ToVector(c->shuffle_index()));
}

void ExpectSameIndices(const GptDataset& a, const GptDataset& b) {
  EXPECT_EQ(a.num_epochs(), b.num_epochs());
  EXPECT_EQ(ToVector(a.document_index()), ToVector(b.document_index()));
  EXPECT_EQ(ToVector(a.sample_index()), ToVector(b.sample_index()));
  EXPECT_EQ(ToVector(a.shuffle_index()), ToVector(b.shuffle_index()));
}

TEST(GptDatasetTest, CacheIsReusedAndRebuiltWhenInputsChange) {
  const std::string dir = TestDir("cache");
  const std::string prefix = dir + "/tiny";
  WriteDataset(prefix, kTiny);
  GptDatasetConfig config = TinyConfig(5);

  ASSERT_OK_AND_ASSIGN(auto built, OpenGpt(prefix, Split::kTrain, config));
  EXPECT_EQ(built->index_source(), IndexSource::kBuilt);
  EXPECT_EQ(built->cache_path(), prefix + "_train_5ns_4sl_1234s_0-3docs.gptidx");
  struct stat st;
  ASSERT_EQ(::stat(built->cache_path().c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 8 * (8 + 6 + 2 * 8 + 7));

  ASSERT_OK_AND_ASSIGN(auto loaded, OpenGpt(prefix, Split::kTrain, config));
  EXPECT_EQ(loaded->index_source(), IndexSource::kLoadedFromCache);
  ExpectSameIndices(*built, *loaded);
  for (int64_t i = 0; i < 7; ++i) EXPECT_EQ(built->Sample(i), loaded->Sample(i));

  // Other parameters: another cache file, built.
  config.num_samples = 4;
  ASSERT_OK_AND_ASSIGN(auto other, OpenGpt(prefix, Split::kTrain, config));
  EXPECT_EQ(other->index_source(), IndexSource::kBuilt);
  config.num_samples = 5;

  // New token values, same lengths: the indices do not depend on them, so the cache stays valid
  // and the samples show the new tokens.
  std::vector<Doc> shifted = kTiny;
  for (Doc& doc : shifted) {
    for (auto& seq : doc) {
      for (int32_t& t : seq) t += 100;
    }
  }
  WriteDataset(prefix, shifted);
  ASSERT_OK_AND_ASSIGN(auto same_shape, OpenGpt(prefix, Split::kTrain, config));
  EXPECT_EQ(same_shape->index_source(), IndexSource::kLoadedFromCache);
  EXPECT_EQ(same_shape->Sample(1), (std::vector<int32_t>{110, 111, 112, 113, 114}));

  // Different document lengths under the same name: the header hash no longer matches.
  WriteDataset(prefix,
               {{{10, 11, 12, 13, 14, 15}}, {{20, 21, 22}}, {{30, 31, 32, 33, 34, 35, 36}}});
  ASSERT_OK_AND_ASSIGN(auto rebuilt, OpenGpt(prefix, Split::kTrain, config));
  EXPECT_EQ(rebuilt->index_source(), IndexSource::kBuilt);
  EXPECT_EQ(rebuilt->num_epochs(), 2);
  EXPECT_EQ(rebuilt->num_samples(), 7);  // (32 - 1) / 4.
  // The stream follows the rebuilt document order; check each sample against it.
  std::vector<int32_t> stream;
  const std::vector<std::vector<int32_t>> docs = {
      {10, 11, 12, 13, 14, 15}, {20, 21, 22}, {30, 31, 32, 33, 34, 35, 36}};
  for (int64_t d : rebuilt->document_index())
    stream.insert(stream.end(), docs[d].begin(), docs[d].end());
  for (int64_t i = 0; i < 7; ++i) {
    const int64_t k = rebuilt->shuffle_index()[i];
    EXPECT_EQ(rebuilt->Sample(i),
              std::vector<int32_t>(stream.begin() + 4 * k, stream.begin() + 4 * k + 5));
  }
  ASSERT_OK_AND_ASSIGN(auto reloaded, OpenGpt(prefix, Split::kTrain, config));
  EXPECT_EQ(reloaded->index_source(), IndexSource::kLoadedFromCache);
  ExpectSameIndices(*rebuilt, *reloaded);
}

TEST(GptDatasetTest, CorruptCacheIsRebuilt) {
  const std::string dir = TestDir("corrupt_cache");
  const std::string prefix = dir + "/tiny";
  WriteDataset(prefix, kTiny);
  const GptDatasetConfig config = TinyConfig(5);
  ASSERT_OK_AND_ASSIGN(auto built, OpenGpt(prefix, Split::kTrain, config));
  const std::string path = built->cache_path();
  const std::string bytes = testing::ReadFileBytes(path);
  const struct {
    const char* name;
    size_t offset;  // Byte to flip; SIZE_MAX truncates instead.
  } kCorruptions[] = {{
                          "magic",
                          0,
                      },
                      {"version", 8},
                      {"hash", 16},
                      {"epochs", 32},
                      {"doc_index", 64},
                      {"sample_index", 64 + 8 * 6 + 3},
                      {"shuffle_index", bytes.size() - 8},
                      {"truncated", SIZE_MAX}};
  for (const auto& c : kCorruptions) {
    SCOPED_TRACE(c.name);
    std::string bad = bytes;
    if (c.offset == SIZE_MAX) {
      bad.resize(bad.size() - 8);
    } else {
      bad[c.offset] ^= 0x5;
    }
    testing::WriteFileBytes(path, bad);
    ASSERT_OK_AND_ASSIGN(auto ds, OpenGpt(prefix, Split::kTrain, config));
    EXPECT_EQ(ds->index_source(), IndexSource::kBuilt);
    ExpectSameIndices(*built, *ds);
    ASSERT_OK_AND_ASSIGN(auto again,
                         OpenGpt(prefix, Split::kTrain, config));  // Rewritten, so loaded.
    EXPECT_EQ(again->index_source(), IndexSource::kLoadedFromCache);
  }
}

TEST(GptDatasetTest, UnwritableCacheDirStillWorks) {
  const std::string dir = TestDir("unwritable");
  WriteDataset(dir + "/tiny", kTiny);
  GptDatasetConfig config = TinyConfig(3);
  config.cache_dir = dir + "/no/such/dir";
  ASSERT_OK_AND_ASSIGN(auto ds, OpenGpt(dir + "/tiny", Split::kTrain, config));
  EXPECT_EQ(ds->index_source(), IndexSource::kBuilt);
  EXPECT_EQ(ds->Sample(0), (std::vector<int32_t>{11, 12, 13, 14, 30}));
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(GptDatasetTest, BadInputsAreInvalidArgument) {
  const std::string dir = TestDir("errors");
  WriteDataset(dir + "/tiny", kTiny);
  ASSERT_OK_AND_ASSIGN(auto data, Open(dir + "/tiny"));
  GptDatasetConfig good;
  good.split = "1,1,1";
  good.seq_len = 4;
  good.num_samples = 2;
  ASSERT_TRUE(GptDataset::Create(data, Split::kTrain, good).ok());

  auto expect_error = [&](std::shared_ptr<const IndexedDataset> d, Split split,
                          const GptDatasetConfig& config, const std::string& message) {
    absl::StatusOr<std::unique_ptr<GptDataset>> ds = GptDataset::Create(d, split, config);
    ASSERT_FALSE(ds.ok()) << message;
    EXPECT_EQ(ds.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ds.status().message().find(message), std::string::npos) << ds.status();
  };
  GptDatasetConfig c = good;
  c.seq_len = 0;
  expect_error(data, Split::kTrain, c, "seq_len");
  c = good;
  c.num_samples = 0;
  expect_error(data, Split::kTrain, c, "num_samples");
  c = good;
  c.num_samples = int64_t{1} << 61;
  expect_error(data, Split::kTrain, c, "too large");
  c = good;
  c.split = "1,x";
  expect_error(data, Split::kTrain, c, "cannot parse");
  c = good;
  c.split = "1,0,0";
  expect_error(data, Split::kValid, c, "(valid): split \"1,0,0\" gives it no documents (of 3)");

  WriteDataset(dir + "/empty_docs", {{}, {{}}, {{1}}});
  c = good;
  ASSERT_OK_AND_ASSIGN(auto empty_docs, Open(dir + "/empty_docs"));
  expect_error(empty_docs, Split::kTrain, c, "hold no tokens");

  // A float dataset (hand-made: the writer refuses float dtypes).
  {
    std::ofstream idx(dir + "/floats.idx", std::ios::binary);
    std::string h("MMIDIDX\0\0", 9);
    const uint64_t version = 1, n = 1, d1 = 2;
    const int32_t len = 1;
    const int64_t ptr = 0, d0 = 0, dn = 1;
    h.append(reinterpret_cast<const char*>(&version), 8);
    h.push_back(7);
    h.append(reinterpret_cast<const char*>(&n), 8);
    h.append(reinterpret_cast<const char*>(&d1), 8);
    h.append(reinterpret_cast<const char*>(&len), 4);
    h.append(reinterpret_cast<const char*>(&ptr), 8);
    h.append(reinterpret_cast<const char*>(&d0), 8);
    h.append(reinterpret_cast<const char*>(&dn), 8);
    idx << h;
    std::ofstream bin(dir + "/floats.bin", std::ios::binary);
    bin << std::string(4, '\0');
  }
  ASSERT_OK_AND_ASSIGN(auto floats, Open(dir + "/floats"));
  expect_error(floats, Split::kTrain, good, "token dtype f32 is not an integer type");
}

TEST(GptDatasetDeathTest, SampleIndexOutOfRange) {
  const std::string prefix = TestDir("death") + "/tiny";
  WriteDataset(prefix, kTiny);
  ASSERT_OK_AND_ASSIGN(auto ds, OpenGpt(prefix, Split::kTrain, TinyConfig(3)));
  EXPECT_DEATH(ds->Sample(3), "sample 3 out of range");
  std::vector<int32_t> small(4);
  EXPECT_DEATH(ds->GetSample(0, absl::MakeSpan(small)), "");
}

}  // namespace
}  // namespace data
}  // namespace mt
