#include "data/bert_dataset/masking.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/philox.h"
#include "core/status_testutil.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/bert_dataset/philox_stream.h"
#include "data/tokenizers/wordpiece.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

// ---------------------------------------------------------------------------------------------
// The stream's documented draws, from PhiloxBits alone.

double RefDouble(uint64_t seed, uint64_t stream, uint64_t* k) {
  const uint64_t a = PhiloxBits(seed, stream, (*k)++);
  const uint64_t b = PhiloxBits(seed, stream, (*k)++);
  return static_cast<double>(a * 2097152 + (b >> 11)) / 9007199254740992.0;
}

uint32_t RefBelow(uint64_t seed, uint64_t stream, uint64_t* k, uint64_t n) {
  const uint64_t threshold = ((uint64_t{1} << 32) - n) % n;
  for (;;) {
    const uint64_t r = PhiloxBits(seed, stream, (*k)++);
    if (r >= threshold) return static_cast<uint32_t>(r % n);
  }
}

TEST(PhiloxStreamTest, MatchesPhiloxBits) {
  for (uint64_t seed : {uint64_t{0}, uint64_t{1234}, ~uint64_t{0}}) {
    for (uint64_t stream : {uint64_t{0}, uint64_t{7}, uint64_t{1} << 40}) {
      PhiloxStream s(seed, stream);
      uint64_t k = 0;
      for (int i = 0; i < 37; ++i) {
        ASSERT_EQ(s.NextBits(), PhiloxBits(seed, stream, k++));
        ASSERT_EQ(s.NextDouble(), RefDouble(seed, stream, &k));
        const uint64_t n = 1 + static_cast<uint64_t>(i) * 1000003;
        ASSERT_EQ(s.UniformBelow(n), RefBelow(seed, stream, &k, n));
        ASSERT_EQ(s.position(), k);
      }
    }
  }
  PhiloxStream s(5, 6);
  double lo = 1, hi = 0;
  for (int i = 0; i < 10000; ++i) {
    const double u = s.NextDouble();
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  EXPECT_GE(lo, 0.0);
  EXPECT_LT(lo, 0.001);
  EXPECT_LT(hi, 1.0);
  EXPECT_GT(hi, 0.999);
}

// ---------------------------------------------------------------------------------------------
// Vocabularies.

// 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], 4 [MASK], then n - 5 words; every third is a "##" piece.
std::vector<std::string> TestTokens(int n) {
  std::vector<std::string> t = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (int i = 5; i < n; ++i)
    t.push_back(i % 3 == 0 ? absl::StrCat("##w", i) : absl::StrCat("w", i));
  return t;
}

TEST(BertVocabTest, FromTokens) {
  ASSERT_OK_AND_ASSIGN(const BertVocab v, BertVocab::FromTokens(TestTokens(12)));
  EXPECT_EQ(v.vocab_size, 12);
  EXPECT_EQ(v.pad, 0);
  EXPECT_EQ(v.cls, 2);
  EXPECT_EQ(v.sep, 3);
  EXPECT_EQ(v.mask, 4);
  EXPECT_EQ(v.is_continuation, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0, 0}));
  EXPECT_EQ(v.num_ordinary(), 8);
  std::vector<int32_t> ordinary;
  for (int r = 0; r < v.num_ordinary(); ++r) ordinary.push_back(v.OrdinaryToken(r));
  EXPECT_EQ(ordinary, (std::vector<int32_t>{1, 5, 6, 7, 8, 9, 10, 11}));
  // Specials anywhere.
  ASSERT_OK_AND_ASSIGN(const BertVocab w,
                       BertVocab::FromTokens({"a", "[MASK]", "b", "[SEP]", "[CLS]", "c", "[PAD]"}));
  std::vector<int32_t> ord;
  for (int r = 0; r < w.num_ordinary(); ++r) ord.push_back(w.OrdinaryToken(r));
  EXPECT_EQ(ord, (std::vector<int32_t>{0, 2, 5}));

  EXPECT_EQ(BertVocab::FromTokens({"[PAD]", "[CLS]", "[SEP]", "x"}).status().code(),
            absl::StatusCode::kInvalidArgument);  // No [MASK].
  EXPECT_EQ(BertVocab::FromTokens({"[PAD]", "[CLS]", "[SEP]", "[MASK]"}).status().code(),
            absl::StatusCode::kInvalidArgument);  // Nothing ordinary.
  BertVocab bad = v;
  bad.mask = bad.cls;
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
  bad = v;
  bad.is_continuation.pop_back();
  EXPECT_EQ(bad.Validate().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BertVocabTest, FromWordPiece) {
  absl::StatusOr<std::unique_ptr<WordPiece>> wp = WordPiece::LoadDefault();
  ASSERT_TRUE(wp.ok()) << wp.status();
  absl::StatusOr<BertVocab> v = BertVocab::FromWordPiece(**wp);
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->vocab_size, 30522);
  EXPECT_EQ(v->pad, 0);
  EXPECT_EQ(v->cls, 101);
  EXPECT_EQ(v->sep, 102);
  EXPECT_EQ(v->mask, 103);
  EXPECT_TRUE(v->is_continuation[(*wp)->TokenId("##s")]);
  EXPECT_FALSE(v->is_continuation[(*wp)->TokenId("the")]);
}

// ---------------------------------------------------------------------------------------------
// Exact decisions on a tiny sample, reproduced from PhiloxBits by the documented draw order.

TEST(MaskTokensTest, TinySampleMatchesTheDocumentedDraws) {
  ASSERT_OK_AND_ASSIGN(const BertVocab vocab, BertVocab::FromTokens(TestTokens(40)));
  const MaskingConfig config;                          // 15%, 3-grams, 80/10/10.
  const std::vector<int32_t> original = {2, 7, 8, 3};  // [CLS] w7 w8 [SEP]: two words.
  int mask = 0, keep = 0, random = 0;
  for (uint64_t stream = 0; stream < 300; ++stream) {
    const uint64_t seed = 99;
    // Expected: num_to_predict = max(1, round(4 * 0.15)) = 1.
    uint64_t k = 0;
    int order[2] = {0, 1};
    std::swap(order[1], order[RefBelow(seed, stream, &k, 2)]);
    const int s = order[0];
    const int available = 2 - s;  // n-gram lengths that fit: 2 or 1.
    RefDouble(seed, stream, &k);  // n is drawn, then shortened to 1 word.
    const int position = 1 + s;
    std::vector<int32_t> want = original;
    if (RefDouble(seed, stream, &k) < 0.8) {
      want[position] = vocab.mask;
      ++mask;
    } else if (RefDouble(seed, stream, &k) < 0.5) {
      ++keep;
    } else {
      want[position] = vocab.OrdinaryToken(
          static_cast<int32_t>(RefBelow(seed, stream, &k, vocab.num_ordinary())));
      ++random;
    }

    std::vector<int32_t> tokens = original;
    PhiloxStream rng(seed, stream);
    MaskedPositions out;
    MaskingTrace trace;
    MaskTokens(absl::MakeSpan(tokens), vocab, config, &rng, &out, &trace);
    ASSERT_EQ(tokens, want) << "stream " << stream;
    ASSERT_EQ(out.positions, std::vector<int32_t>{position});
    ASSERT_EQ(out.labels, std::vector<int32_t>{original[position]});
    ASSERT_EQ(trace.num_to_predict, 1);
    ASSERT_EQ(trace.drawn_max, std::vector<int>{available});
    ASSERT_EQ(trace.masked_ngram, std::vector<int>{1});
    ASSERT_EQ(rng.position(), k);  // Nothing else was drawn.
  }
  EXPECT_GT(mask, 200);
  EXPECT_GT(keep, 10);
  EXPECT_GT(random, 10);
}

TEST(MaskTokensTest, MaskingOffAndDeterminism) {
  ASSERT_OK_AND_ASSIGN(const BertVocab vocab, BertVocab::FromTokens(TestTokens(100)));
  std::vector<int32_t> tokens = {2, 10, 11, 12, 3, 20, 21, 3};
  const std::vector<int32_t> original = tokens;
  MaskingConfig off;
  off.masked_lm_prob = 0;
  PhiloxStream rng(1, 2);
  MaskedPositions out;
  MaskTokens(absl::MakeSpan(tokens), vocab, off, &rng, &out);
  EXPECT_EQ(tokens, original);
  EXPECT_TRUE(out.positions.empty());
  EXPECT_EQ(rng.position(), 0u);

  const MaskingConfig on;
  std::vector<int32_t> t1 = original, t2 = original;
  PhiloxStream r1(3, 4), r2(3, 4);
  MaskedPositions o1, o2;
  MaskTokens(absl::MakeSpan(t1), vocab, on, &r1, &o1);
  MaskTokens(absl::MakeSpan(t2), vocab, on, &r2, &o2);
  EXPECT_EQ(t1, t2);
  EXPECT_EQ(o1.positions, o2.positions);

  // Only special tokens: nothing to mask.
  std::vector<int32_t> specials = {2, 3, 3, 0};
  MaskTokens(absl::MakeSpan(specials), vocab, on, &r1, &o1);
  EXPECT_EQ(specials, (std::vector<int32_t>{2, 3, 3, 0}));
  EXPECT_TRUE(o1.positions.empty());
}

TEST(MaskTokensTest, ConfigValidation) {
  EXPECT_TRUE(MaskingConfig().Validate().ok());
  auto code = [](auto mutate) {
    MaskingConfig c;
    mutate(&c);
    return c.Validate().code();
  };
  const auto kBad = absl::StatusCode::kInvalidArgument;
  EXPECT_EQ(code([](MaskingConfig* c) { c->masked_lm_prob = -0.1; }), kBad);
  EXPECT_EQ(code([](MaskingConfig* c) { c->masked_lm_prob = 1.5; }), kBad);
  EXPECT_EQ(code([](MaskingConfig* c) { c->mask_token_prob = 0.95; }), kBad);  // + 0.1 > 1.
  EXPECT_EQ(code([](MaskingConfig* c) { c->random_token_prob = -1; }), kBad);
  EXPECT_EQ(code([](MaskingConfig* c) { c->max_ngram = 0; }), kBad);
  EXPECT_EQ(code([](MaskingConfig* c) { c->mask_token_prob = std::nan(""); }), kBad);
}

// ---------------------------------------------------------------------------------------------
// Rates over many samples.

// Word ranges of a token sequence, by the test's own reading of rule 1.
std::vector<std::pair<int, int>> Words(const std::vector<int32_t>& t, const BertVocab& v) {
  std::vector<std::pair<int, int>> words;
  for (int i = 0; i < static_cast<int>(t.size()); ++i) {
    if (v.IsSpecial(t[i])) continue;
    const bool joins = v.is_continuation[t[i]] && i > 0 && !v.IsSpecial(t[i - 1]);
    if (joins) {
      words.back().second = i + 1;
    } else {
      words.emplace_back(i, i + 1);
    }
  }
  return words;
}

// [CLS] A [SEP] B [SEP] with random ordinary tokens (a third of them "##" pieces).
std::vector<int32_t> RandomSample(const BertVocab& vocab, std::mt19937* gen) {
  const int len_a = 5 + static_cast<int>((*gen)() % 120);
  const int len_b = 5 + static_cast<int>((*gen)() % 120);
  std::vector<int32_t> tokens = {vocab.cls};
  for (int i = 0; i < len_a + len_b + 1; ++i) {
    tokens.push_back(i == len_a ? vocab.sep : 5 + static_cast<int32_t>((*gen)() % 995));
  }
  tokens.push_back(vocab.sep);
  return tokens;
}

// Counts over many masked samples.
struct MaskingTally {
  int64_t tokens = 0, masked = 0, to_predict = 0;
  int64_t as_mask = 0, unchanged = 0, as_random = 0;           // What the masked tokens became.
  std::vector<int64_t> drawn3 = std::vector<int64_t>(4, 0);    // n drawn when 3 were available.
  std::vector<int64_t> masked_n = std::vector<int64_t>(4, 0);  // n of the n-grams masked.
};

// Checks one sample masked with the default config (`tokens`, from `original`) and adds it to
// *tally: num_to_predict, labels, positions in order, nothing special masked or drawn, nothing
// unmasked changed, whole words.
void CheckAndCount(const BertVocab& vocab, const std::vector<int32_t>& original,
                   const std::vector<int32_t>& tokens, const MaskedPositions& out,
                   const MaskingTrace& trace, MaskingTally* tally) {
  const int64_t n = static_cast<int64_t>(original.size());
  ASSERT_EQ(trace.num_to_predict,
            std::max<int64_t>(1, static_cast<int64_t>(std::nearbyint(n * 0.15))));
  ASSERT_LE(static_cast<int64_t>(out.positions.size()), trace.num_to_predict);
  tally->tokens += n;
  tally->masked += static_cast<int64_t>(out.positions.size());
  tally->to_predict += trace.num_to_predict;

  std::vector<uint8_t> is_masked(n, 0);
  for (size_t m = 0; m < out.positions.size(); ++m) {
    const int p = out.positions[m];
    if (m > 0) {
      ASSERT_LT(out.positions[m - 1], p);
    }
    ASSERT_EQ(out.labels[m], original[p]);
    ASSERT_FALSE(vocab.IsSpecial(original[p])) << "special token masked at " << p;
    is_masked[p] = 1;
    if (tokens[p] == vocab.mask) {
      ++tally->as_mask;
    } else if (tokens[p] == original[p]) {
      ++tally->unchanged;
    } else {
      ASSERT_FALSE(vocab.IsSpecial(tokens[p]));
      ++tally->as_random;
    }
  }
  for (int p = 0; p < n; ++p) {
    if (!is_masked[p]) {
      ASSERT_EQ(tokens[p], original[p]);
    }
  }
  for (const auto& [begin, end] : Words(original, vocab)) {
    for (int p = begin + 1; p < end; ++p) {
      ASSERT_EQ(is_masked[p], is_masked[begin])
          << "word [" << begin << ", " << end << ") partially masked";
    }
  }
  for (size_t d = 0; d < trace.drawn_ngram.size(); ++d) {
    if (trace.drawn_max[d] == 3) ++tally->drawn3[trace.drawn_ngram[d]];
  }
  for (int g : trace.masked_ngram) ++tally->masked_n[g];
}

TEST(MaskTokensTest, RatesWholeWordsAndNgramLengths) {
  ASSERT_OK_AND_ASSIGN(const BertVocab vocab, BertVocab::FromTokens(TestTokens(1000)));
  const MaskingConfig config;
  std::mt19937 gen(5);
  MaskingTally tally;
  const int kSamples = 4000;
  for (int sample = 0; sample < kSamples; ++sample) {
    const std::vector<int32_t> original = RandomSample(vocab, &gen);
    std::vector<int32_t> tokens = original;
    PhiloxStream rng(2024, static_cast<uint64_t>(sample));
    MaskedPositions out;
    MaskingTrace trace;
    MaskTokens(absl::MakeSpan(tokens), vocab, config, &rng, &out, &trace);
    ASSERT_NO_FATAL_FAILURE(CheckAndCount(vocab, original, tokens, out, trace, &tally));
  }
  // 15%: the masked count reaches num_to_predict almost always.
  const double rate = static_cast<double>(tally.masked) / tally.tokens;
  EXPECT_NEAR(rate, 0.15, 0.003) << tally.masked << " of " << tally.tokens;
  EXPECT_GT(static_cast<double>(tally.masked) / tally.to_predict, 0.995);

  // 80 / 10 / 10 (a random token equal to the original counts as unchanged: 0.1 / 995).
  const double m = static_cast<double>(tally.masked);
  auto tol = [&](double p) { return 5 * std::sqrt(p * (1 - p) / m); };
  EXPECT_NEAR(tally.as_mask / m, 0.8, tol(0.8));
  EXPECT_NEAR(tally.unchanged / m, 0.1 + 0.1 / 995, tol(0.1));
  EXPECT_NEAR(tally.as_random / m, 0.1 * 994 / 995, tol(0.1));

  // Drawn lengths follow P(n) = (1/n) / (1 + 1/2 + 1/3) = 6/11, 3/11, 2/11.
  const std::vector<int64_t>& drawn3 = tally.drawn3;
  const double draws = static_cast<double>(drawn3[1] + drawn3[2] + drawn3[3]);
  ASSERT_GT(draws, 10000);
  for (int g = 1; g <= 3; ++g) {
    const double p = (1.0 / g) / (11.0 / 6.0);
    EXPECT_NEAR(drawn3[g] / draws, p, 5 * std::sqrt(p * (1 - p) / draws)) << "n = " << g;
  }
  // The n-grams actually masked stay close to it but favour short ones, as in Megatron: near
  // the end of the budget n is shortened to fit, a longer n-gram more often overlaps one already
  // masked, and at the last words fewer lengths are available (measured: 0.61, 0.25, 0.14).
  const std::vector<int64_t>& masked_n = tally.masked_n;
  const double grams = static_cast<double>(masked_n[1] + masked_n[2] + masked_n[3]);
  for (int g = 1; g <= 3; ++g) {
    const double p = (1.0 / g) / (11.0 / 6.0);
    EXPECT_NEAR(masked_n[g] / grams, p, 0.08) << "n = " << g;
  }
  EXPECT_GT(masked_n[1], masked_n[2]);
  EXPECT_GT(masked_n[2], masked_n[3]);
  std::printf(
      "rate %.4f, [MASK] %.4f, unchanged %.4f, random %.4f, drawn n %.4f %.4f %.4f, "
      "masked n %.4f %.4f %.4f\n",
      rate, tally.as_mask / m, tally.unchanged / m, tally.as_random / m, drawn3[1] / draws,
      drawn3[2] / draws, drawn3[3] / draws, masked_n[1] / grams, masked_n[2] / grams,
      masked_n[3] / grams);
}

}  // namespace
}  // namespace data
}  // namespace mt
