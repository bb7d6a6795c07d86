#include "data/bert_dataset/bert_dataset.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status.h"
#include "core/status_testutil.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/indexed/indexed_dataset.h"
#include "data/indexed/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

using Doc = std::vector<std::vector<int32_t>>;  // A document: its sentences.

constexpr int32_t kPad = 0, kCls = 2, kSep = 3, kMask = 4;

// 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], then words; every third is a "##" piece.
absl::StatusOr<BertVocab> TestVocab(int n = 1000) {
  std::vector<std::string> t = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 5; i < n; ++i)
    t.push_back(i % 3 == 0 ? absl::StrCat("##w", i) : absl::StrCat("w", i));
  return BertVocab::FromTokens(t);
}

std::string TestDir(const std::string& name) { return testing::FreshTestDir("bert_" + name); }

absl::StatusOr<std::shared_ptr<const IndexedDataset>> MakeDataset(const std::string& name,
                                                                  const std::vector<Doc>& docs) {
  const std::string prefix = TestDir(name) + "/data";
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDatasetWriter> w,
                   IndexedDatasetWriter::Create(prefix, TokenDType::kU16));
  for (const Doc& doc : docs) {
    for (const auto& s : doc) RETURN_IF_ERROR(w->AddSequence(s));
    RETURN_IF_ERROR(w->EndDocument());
  }
  RETURN_IF_ERROR(w->Finalize());
  ASSIGN_OR_RETURN(std::unique_ptr<IndexedDataset> ds, IndexedDataset::Open(prefix));
  return std::shared_ptr<const IndexedDataset>(std::move(ds));
}

// BertDataset::Create with TestVocab().
absl::StatusOr<std::unique_ptr<BertDataset>> Create(std::shared_ptr<const IndexedDataset> data,
                                                    const BertDatasetConfig& config,
                                                    Split split = Split::kTrain) {
  ASSIGN_OR_RETURN(BertVocab vocab, TestVocab());
  return BertDataset::Create(std::move(data), split, config, std::move(vocab));
}

// The stream's documented draws, from PhiloxBits alone (philox_stream.h).
struct RefStream {
  uint64_t seed, stream, k = 0;
  double Double() {
    const uint64_t a = PhiloxBits(seed, stream, k++);
    const uint64_t b = PhiloxBits(seed, stream, k++);
    return static_cast<double>(a * 2097152 + (b >> 11)) / 9007199254740992.0;
  }
  uint32_t Below(uint64_t n) {
    const uint64_t threshold = ((uint64_t{1} << 32) - n) % n;
    for (;;) {
      const uint64_t r = PhiloxBits(seed, stream, k++);
      if (r >= threshold) return static_cast<uint32_t>(r % n);
    }
  }
};

std::vector<int32_t> Concat(const Doc& sentences, size_t begin, size_t end) {
  std::vector<int32_t> out;
  for (size_t s = begin; s < end; ++s)
    out.insert(out.end(), sentences[s].begin(), sentences[s].end());
  return out;
}

// ---------------------------------------------------------------------------------------------

TEST(BertDatasetTest, ExactSamplesWithMaskingOff) {
  // Sequences 0-2 (doc 0), 3 (doc 1: one sentence, never sampled), 4-5 (doc 2).
  const std::vector<Doc> docs = {
      {{10, 11}, {12, 13}, {14, 15, 16}}, {{20, 21, 22}}, {{30}, {31, 32}}};
  const std::vector<std::vector<int32_t>> sentences = {{10, 11},     {12, 13}, {14, 15, 16},
                                                       {20, 21, 22}, {30},     {31, 32}};
  ASSERT_OK_AND_ASSIGN(auto data, MakeDataset("exact", docs));
  int swapped = 0, in_order = 0;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    BertDatasetConfig config;
    config.split = "1";
    config.seq_len = 16;
    config.num_samples = 2;
    config.seed = seed;
    config.short_seq_prob = 0;
    config.masking.masked_lm_prob = 0;
    ASSERT_OK_AND_ASSIGN(auto ds, Create(data, config));
    ASSERT_EQ(ds->num_samples(), 2);
    ASSERT_EQ(ds->num_epochs(), 1);
    std::map<int64_t, int64_t> spans;
    for (int64_t i = 0; i < 2; ++i) {
      spans[ds->span(i).begin] = ds->span(i).end;
      EXPECT_EQ(ds->span(i).target_length, 13);
    }
    EXPECT_EQ(spans, (std::map<int64_t, int64_t>{{0, 3}, {4, 6}}));

    for (int64_t i = 0; i < 2; ++i) {
      const BertSampleSpan& sp = ds->span(i);
      const Doc doc(sentences.begin() + sp.begin, sentences.begin() + sp.end);
      RefStream ref{seed, static_cast<uint64_t>(i)};
      const size_t a_end = 1 + ref.Below(doc.size() - 1);
      std::vector<int32_t> a = Concat(doc, 0, a_end);
      std::vector<int32_t> b = Concat(doc, a_end, doc.size());
      const bool swap = ref.Double() < 0.5;
      if (swap) std::swap(a, b);
      swap ? ++swapped : ++in_order;

      std::vector<int32_t> tokens = {kCls};
      std::vector<int32_t> types = {0};
      tokens.insert(tokens.end(), a.begin(), a.end());
      tokens.push_back(kSep);
      types.resize(tokens.size(), 0);
      tokens.insert(tokens.end(), b.begin(), b.end());
      tokens.push_back(kSep);
      types.resize(tokens.size(), 1);
      const size_t real = tokens.size();
      std::vector<int32_t> padding(16, 0);
      std::fill(padding.begin(), padding.begin() + real, 1);
      tokens.resize(16, kPad);
      types.resize(16, 0);

      const BertSample s = ds->Sample(i);
      EXPECT_EQ(s.tokens, tokens) << "seed " << seed << " sample " << i;
      EXPECT_EQ(s.token_types, types);
      EXPECT_EQ(s.padding_mask, padding);
      EXPECT_EQ(s.labels, std::vector<int32_t>(16, kIgnoreLabel));
      EXPECT_EQ(s.loss_mask, std::vector<int32_t>(16, 0));
      EXPECT_EQ(s.sop_label, swap ? 1 : 0);
      EXPECT_FALSE(s.truncated);
      EXPECT_EQ(s.num_tokens, static_cast<int32_t>(real));
    }
  }
  EXPECT_GT(swapped, 3);
  EXPECT_GT(in_order, 3);
}

TEST(BertDatasetTest, ExactTruncation) {
  std::vector<int32_t> s0, s1;
  for (int i = 0; i < 10; ++i) {
    s0.push_back(100 + i);
    s1.push_back(200 + i);
  }
  ASSERT_OK_AND_ASSIGN(auto data, MakeDataset("truncation", {{s0, s1}}));
  for (uint64_t seed = 0; seed < 8; ++seed) {
    BertDatasetConfig config;
    config.split = "1";
    config.seq_len = 13;  // Target 10 for 20 tokens: 10 are dropped.
    config.seed = seed;
    config.short_seq_prob = 0;
    config.masking.masked_lm_prob = 0;
    ASSERT_OK_AND_ASSIGN(auto ds, Create(data, config));
    ASSERT_EQ(ds->num_samples(), 1);

    RefStream ref{seed, 0};
    EXPECT_EQ(ref.Below(1), 0u);  // a_end = 1 (one draw).
    std::deque<int32_t> a(s0.begin(), s0.end()), b(s1.begin(), s1.end());
    const bool swap = ref.Double() < 0.5;
    if (swap) std::swap(a, b);
    while (a.size() + b.size() > 10) {
      std::deque<int32_t>& seg = a.size() > b.size() ? a : b;
      if (ref.Double() < 0.5) {
        seg.pop_front();
      } else {
        seg.pop_back();
      }
    }
    std::vector<int32_t> tokens = {kCls};
    tokens.insert(tokens.end(), a.begin(), a.end());
    tokens.push_back(kSep);
    tokens.insert(tokens.end(), b.begin(), b.end());
    tokens.push_back(kSep);
    ASSERT_EQ(tokens.size(), 13u);
    const BertSample s = ds->Sample(0);
    EXPECT_EQ(s.tokens, tokens) << "seed " << seed;
    EXPECT_TRUE(s.truncated);
    EXPECT_EQ(s.sop_label, swap ? 1 : 0);
    EXPECT_EQ(std::count(s.token_types.begin(), s.token_types.end(), 1), 6);  // B + [SEP].
  }
}

// Random documents: 1-8 sentences of 1-30 tokens.
std::vector<Doc> RandomDocs(int n, uint32_t seed, int max_sentences = 8) {
  std::mt19937 gen(seed);
  std::vector<Doc> docs(n);
  for (Doc& d : docs) {
    d.resize(1 + gen() % max_sentences);
    for (auto& s : d) {
      s.resize(1 + gen() % 30);
      for (int32_t& t : s) t = 5 + static_cast<int32_t>(gen() % 995);
    }
  }
  return docs;
}

TEST(BertDatasetTest, SampleMappingFollowsTheRules) {
  const std::vector<Doc> docs = RandomDocs(300, 3);
  ASSERT_OK_AND_ASSIGN(auto data, MakeDataset("mapping", docs));
  BertDatasetConfig config;
  config.split = "1";
  config.seq_len = 40;  // max_len 37
  config.short_seq_prob = 0.3;
  config.num_samples = 1;  // One epoch.
  ASSERT_OK_AND_ASSIGN(auto ds, Create(data, config));
  ASSERT_EQ(ds->num_epochs(), 1);

  std::vector<BertSampleSpan> spans;
  for (int64_t i = 0; i < ds->num_samples(); ++i) spans.push_back(ds->span(i));
  std::sort(spans.begin(), spans.end(),
            [](const BertSampleSpan& x, const BertSampleSpan& y) { return x.begin < y.begin; });
  size_t next = 0;
  int short_targets = 0;
  for (int64_t d = 0; d < data->num_documents(); ++d) {
    const int64_t first = data->document_index(d), last = data->document_index(d + 1);
    if (last - first < 2) continue;
    // The document's sentences are covered by consecutive spans.
    for (int64_t pos = first; pos < last; ++next) {
      ASSERT_LT(next, spans.size());
      const BertSampleSpan& sp = spans[next];
      ASSERT_EQ(sp.begin, pos);
      ASSERT_GE(sp.end - sp.begin, 2);
      ASSERT_LE(sp.end, last);
      ASSERT_GE(sp.target_length, 2);
      ASSERT_LE(sp.target_length, 37);
      short_targets += sp.target_length < 37;
      // Cut at the first sentence where >= 2 were gathered, the target is reached and >= 2
      // remain; or at the document's end.
      int64_t len = 0;
      for (int64_t s = sp.begin; s < sp.end; ++s) {
        len += data->sequence_length(s);
        const bool cut =
            (len >= sp.target_length && last - s - 1 > 1 && s - sp.begin + 1 >= 2) || s == last - 1;
        ASSERT_EQ(cut, s == sp.end - 1) << "span [" << sp.begin << ", " << sp.end << ")";
      }
      pos = sp.end;
    }
  }
  EXPECT_EQ(next, spans.size());
  const double short_share = static_cast<double>(short_targets) / spans.size();
  EXPECT_GT(short_share, 0.2);  // About 0.3 (fewer spans per document when targets are long).
  EXPECT_LT(short_share, 0.6);

  // More samples take more epochs, all kept.
  config.num_samples = 3 * ds->num_samples();
  ASSERT_OK_AND_ASSIGN(auto more, Create(data, config));
  EXPECT_GE(more->num_samples(), config.num_samples);
  EXPECT_GE(more->num_epochs(), 2);
}

TEST(BertDatasetTest, StatisticsOverManySamples) {
  const std::vector<Doc> docs = RandomDocs(400, 9);
  ASSERT_OK_AND_ASSIGN(auto data, MakeDataset("stats", docs));
  ASSERT_OK_AND_ASSIGN(const BertVocab vocab, TestVocab());
  BertDatasetConfig config;
  config.split = "1";
  config.seq_len = 64;
  config.num_samples = 6000;
  config.short_seq_prob = 0.1;
  ASSERT_OK_AND_ASSIGN(auto ds, Create(data, config));
  int64_t real = 0, masked = 0, as_mask = 0, unchanged = 0, random = 0, swapped = 0;
  int64_t to_predict = 0;
  for (int64_t i = 0; i < ds->num_samples(); ++i) {
    MaskingTrace trace;
    BertSample s;
    ds->GetSample(i, &s, &trace);
    ASSERT_EQ(s.tokens.size(), 64u);
    ASSERT_LE(s.num_tokens, ds->span(i).target_length + 3);
    real += s.num_tokens;
    to_predict += trace.num_to_predict;
    swapped += s.sop_label;
    // Layout: [CLS] A [SEP] B [SEP] [PAD]...
    ASSERT_EQ(s.tokens[0], kCls);
    std::vector<int> seps;
    for (int p = 0; p < 64; ++p) {
      ASSERT_EQ(s.padding_mask[p], p < s.num_tokens ? 1 : 0);
      if (p >= s.num_tokens) {
        ASSERT_EQ(s.tokens[p], kPad);
        ASSERT_EQ(s.token_types[p], 0);
      }
      if (p < s.num_tokens && s.tokens[p] == kSep) seps.push_back(p);
      ASSERT_EQ(s.loss_mask[p], s.labels[p] != kIgnoreLabel ? 1 : 0);
    }
    ASSERT_EQ(seps.size(), 2u);  // Random replacements are never [SEP].
    ASSERT_EQ(seps[1], s.num_tokens - 1);
    for (int p = 0; p < s.num_tokens; ++p) {
      ASSERT_EQ(s.token_types[p], p > seps[0] ? 1 : 0);
    }
    ASSERT_GE(seps[0], 2);            // A is not empty.
    ASSERT_GE(seps[1] - seps[0], 2);  // Nor is B.
    // Masked tokens; the original sequence; whole words.
    std::vector<int32_t> original(s.tokens.begin(), s.tokens.begin() + s.num_tokens);
    for (int p = 0; p < s.num_tokens; ++p) {
      if (s.labels[p] == kIgnoreLabel) continue;
      ++masked;
      original[p] = s.labels[p];
      ASSERT_FALSE(vocab.IsSpecial(s.labels[p]));
      if (s.tokens[p] == kMask) {
        ++as_mask;
      } else if (s.tokens[p] == s.labels[p]) {
        ++unchanged;
      } else {
        ++random;
      }
    }
    for (int p = 1; p < s.num_tokens; ++p) {
      const bool joins = vocab.is_continuation[original[p]] && !vocab.IsSpecial(original[p - 1]);
      if (joins) {
        ASSERT_EQ(s.loss_mask[p], s.loss_mask[p - 1]) << "word split at " << p;
      }
    }
  }
  const double rate = static_cast<double>(masked) / real;
  EXPECT_NEAR(rate, 0.15, 0.005) << masked << " of " << real;
  EXPECT_GT(static_cast<double>(masked) / to_predict, 0.99);
  const double m = static_cast<double>(masked);
  auto tol = [&](double p) { return 5 * std::sqrt(p * (1 - p) / m); };
  EXPECT_NEAR(as_mask / m, 0.8, tol(0.8));
  EXPECT_NEAR(unchanged / m, 0.1 + 0.1 / 995, tol(0.1));
  EXPECT_NEAR(random / m, 0.1 * 994 / 995, tol(0.1));
  const double n = static_cast<double>(ds->num_samples());
  EXPECT_NEAR(swapped / n, 0.5, 5 * std::sqrt(0.25 / n));
  std::printf("masked %.4f of real tokens; [MASK] %.4f unchanged %.4f random %.4f; swapped %.4f\n",
              rate, as_mask / m, unchanged / m, random / m, swapped / n);
}

TEST(BertDatasetTest, DeterministicInSeedAndIndex) {
  ASSERT_OK_AND_ASSIGN(auto data, MakeDataset("determinism", RandomDocs(100, 4)));
  BertDatasetConfig config;
  config.split = "8,1,1";
  config.seq_len = 48;
  config.num_samples = 200;
  ASSERT_OK_AND_ASSIGN(auto a, Create(data, config));
  ASSERT_OK_AND_ASSIGN(auto b, Create(data, config));
  ASSERT_EQ(a->num_samples(), b->num_samples());
  std::vector<BertSample> first(a->num_samples());
  for (int64_t i = 0; i < a->num_samples(); ++i) {
    first[i] = a->Sample(i);
    const BertSample again = b->Sample(i);
    ASSERT_EQ(first[i].tokens, again.tokens);
    ASSERT_EQ(first[i].labels, again.labels);
    ASSERT_EQ(first[i].sop_label, again.sop_label);
  }
  // Any thread, any order, reused buffers.
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      BertSample s;
      for (int64_t i = a->num_samples() - 1 - t; i >= 0; i -= 4) {
        a->GetSample(i, &s);
        mismatches[t] += s.tokens != first[i].tokens || s.labels != first[i].labels;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));

  // Another seed: other samples.
  config.seed = 99;
  ASSERT_OK_AND_ASSIGN(auto c, Create(data, config));
  int same = 0;
  for (int64_t i = 0; i < std::min(a->num_samples(), c->num_samples()); ++i) {
    same += c->Sample(i).tokens == first[i].tokens;
  }
  EXPECT_LT(same, 5);
  // The validation split uses its own documents.
  ASSERT_OK_AND_ASSIGN(auto valid, Create(data, config, Split::kValid));
  EXPECT_EQ(valid->document_begin(), 80);
  EXPECT_EQ(valid->document_end(), 90);
  for (int64_t i = 0; i < valid->num_samples(); ++i) {
    ASSERT_GE(valid->span(i).begin, data->document_index(80));
    ASSERT_LE(valid->span(i).end, data->document_index(90));
  }
}

TEST(BertDatasetTest, Errors) {
  ASSERT_OK_AND_ASSIGN(auto data, MakeDataset("errors", RandomDocs(20, 5)));
  BertDatasetConfig config;
  config.split = "1";
  config.seq_len = 32;
  ASSERT_OK_AND_ASSIGN(const BertVocab vocab, TestVocab());
  auto code = [&](const BertDatasetConfig& c) {
    return BertDataset::Create(data, Split::kTrain, c, vocab).status();
  };
  EXPECT_TRUE(code(config).ok());
  BertDatasetConfig c = config;
  c.seq_len = 4;
  EXPECT_EQ(code(c).code(), absl::StatusCode::kInvalidArgument);
  c = config;
  c.num_samples = 0;
  EXPECT_EQ(code(c).code(), absl::StatusCode::kInvalidArgument);
  c = config;
  c.short_seq_prob = 1.5;
  EXPECT_EQ(code(c).code(), absl::StatusCode::kInvalidArgument);
  c = config;
  c.masking.max_ngram = 0;
  EXPECT_EQ(code(c).code(), absl::StatusCode::kInvalidArgument);
  c = config;
  c.split = "1,x";
  EXPECT_EQ(code(c).code(), absl::StatusCode::kInvalidArgument);

  // Ids beyond the vocabulary (e.g. GPT-2 data).
  ASSERT_OK_AND_ASSIGN(auto gpt, MakeDataset("gpt_ids", {{{15496, 995}, {50256}}}));
  absl::Status s = BertDataset::Create(gpt, Split::kTrain, config, vocab).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id 15496"), std::string::npos) << s;
  EXPECT_NE(s.message().find("--tokenizer=bert"), std::string::npos) << s;

  // Only one-sentence documents (not split into sentences).
  ASSERT_OK_AND_ASSIGN(auto unsplit, MakeDataset("unsplit", {{{10, 11, 12}}, {{13, 14}}}));
  s = BertDataset::Create(unsplit, Split::kTrain, config, vocab).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--split_sentences"), std::string::npos) << s;

  // A bad vocabulary.
  BertVocab bad = vocab;
  bad.cls = -1;
  EXPECT_EQ(BertDataset::Create(data, Split::kTrain, config, bad).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace mt
