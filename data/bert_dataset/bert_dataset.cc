#include "data/bert_dataset/bert_dataset.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/bert_dataset/philox_stream.h"
#include "data/gpt_dataset/shuffle.h"
#include "glog/logging.h"

namespace mt {
namespace data {
namespace {

// Checks that every token of sequences [begin, end) is a valid id.
absl::Status CheckTokenRange(const IndexedDataset& data, int64_t begin, int64_t end,
                             int32_t vocab_size) {
  std::vector<int32_t> buffer;
  for (int64_t s = begin; s < end; ++s) {
    const TokenView view = data.sequence(s);
    buffer.resize(static_cast<size_t>(view.size()));
    // CopyTo converts to int32; compare in int64 first so that wide dtypes cannot wrap.
    for (int64_t k = 0; k < view.size(); ++k) {
      const int64_t id = view[k];
      if (id < 0 || id >= vocab_size) {
        return absl::InvalidArgumentError(
            absl::StrCat(data.prefix(), ": token id ", id, " (sequence ", s, ", position ", k,
                         ") is outside the BERT vocabulary [0, ", vocab_size,
                         "); was the data preprocessed with --tokenizer=bert?"));
      }
    }
  }
  return absl::OkStatus();
}

double UniformDouble(std::mt19937_64* rng) {
  return static_cast<double>((*rng)() >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace

absl::Status BertDatasetConfig::Validate() const {
  if (seq_len < 5 || seq_len >= (int64_t{1} << 31)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BertDataset: seq_len must be in [5, 2^31) ([CLS] A [SEP] B [SEP]), got ", seq_len));
  }
  if (num_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("BertDataset: num_samples must be >= 1, got ", num_samples));
  }
  if (!(short_seq_prob >= 0 && short_seq_prob <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("BertDataset: short_seq_prob must be in [0, 1], got ", short_seq_prob));
  }
  return masking.Validate();
}

absl::StatusOr<std::unique_ptr<BertDataset>> BertDataset::Create(
    std::shared_ptr<const IndexedDataset> data, Split split, const BertDatasetConfig& config,
    BertVocab vocab) {
  CHECK(data != nullptr);
  RETURN_IF_ERROR(config.Validate());
  RETURN_IF_ERROR(vocab.Validate());
  if (!IsIntegerTokenDType(data->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(data->prefix(), ": token dtype ",
                                                   TokenDTypeName(data->dtype()),
                                                   " is not an integer type"));
  }
  ASSIGN_OR_RETURN(auto bounds, SplitDocuments(config.split, data->num_documents()));
  const int k = static_cast<int>(split);
  std::unique_ptr<BertDataset> ds(new BertDataset());
  ds->data_ = data;
  ds->config_ = config;
  ds->vocab_ = std::move(vocab);
  ds->doc_begin_ = bounds[k];
  ds->doc_end_ = bounds[k + 1];
  RETURN_IF_ERROR(CheckTokenRange(*data, data->document_index(ds->doc_begin_),
                                  data->document_index(ds->doc_end_), ds->vocab_.vocab_size));

  // Sample mapping.
  std::mt19937_64 rng(config.seed);
  const int32_t max_len = static_cast<int32_t>(config.seq_len - 3);
  auto target_length = [&]() -> int32_t {
    if (config.short_seq_prob > 0 && UniformDouble(&rng) < config.short_seq_prob) {
      return 2 + static_cast<int32_t>(UniformBelow(&rng, static_cast<uint64_t>(max_len - 1)));
    }
    return max_len;
  };
  std::vector<BertSampleSpan>& spans = ds->spans_;
  while (static_cast<int64_t>(spans.size()) < config.num_samples) {
    const size_t before = spans.size();
    for (int64_t d = ds->doc_begin_; d < ds->doc_end_; ++d) {
      const int64_t first = data->document_index(d);
      const int64_t last = data->document_index(d + 1);
      if (last - first < 2) continue;
      int64_t start = first;
      int64_t length = 0;
      int64_t gathered = 0;
      int32_t target = target_length();
      for (int64_t s = first; s < last; ++s) {
        length += data->sequence_length(s);
        ++gathered;
        const int64_t remaining = last - s - 1;
        if ((length >= target && remaining > 1 && gathered >= 2) || remaining == 0) {
          spans.push_back(BertSampleSpan{start, s + 1, target});
          start = s + 1;
          length = 0;
          gathered = 0;
          target = target_length();
        }
      }
    }
    if (spans.size() == before) {
      return absl::InvalidArgumentError(
          absl::StrCat(data->prefix(), ": the ", SplitName(split), " split (documents ",
                       ds->doc_begin_, "-", ds->doc_end_,
                       ") has no document of two or more sentences; BERT data must be "
                       "preprocessed with --split_sentences"));
    }
    ++ds->num_epochs_;
  }
  Shuffle(absl::MakeSpan(spans), &rng);
  return ds;
}

const BertSampleSpan& BertDataset::span(int64_t i) const {
  CHECK(i >= 0 && i < num_samples()) << "sample " << i << " of " << num_samples();
  return spans_[static_cast<size_t>(i)];
}

void BertDataset::GetSample(int64_t i, BertSample* out, MaskingTrace* trace) const {
  const BertSampleSpan& sp = span(i);
  PhiloxStream rng(config_.seed, static_cast<uint64_t>(i));
  const int64_t n = sp.end - sp.begin;

  // Segments A and B as token vectors.
  const int64_t a_end = sp.begin + 1 + rng.UniformBelow(static_cast<uint64_t>(n - 1));
  auto gather = [&](int64_t begin, int64_t end) {
    std::vector<int32_t> v;
    for (int64_t s = begin; s < end; ++s) {
      const TokenView view = data_->sequence(s);
      const size_t old = v.size();
      v.resize(old + static_cast<size_t>(view.size()));
      view.CopyTo(absl::MakeSpan(v.data() + old, static_cast<size_t>(view.size())));
    }
    return v;
  };
  std::vector<int32_t> a = gather(sp.begin, a_end);
  std::vector<int32_t> b = gather(a_end, sp.end);
  out->sop_label = 0;
  if (rng.NextDouble() < 0.5) {
    std::swap(a, b);
    out->sop_label = 1;
  }

  // Truncation: [a_lo, a_hi) and [b_lo, b_hi) stay.
  size_t a_lo = 0, a_hi = a.size(), b_lo = 0, b_hi = b.size();
  out->truncated = false;
  while ((a_hi - a_lo) + (b_hi - b_lo) > static_cast<size_t>(sp.target_length)) {
    out->truncated = true;
    const bool from_a = (a_hi - a_lo) > (b_hi - b_lo);
    const bool front = rng.NextDouble() < 0.5;
    if (front) {
      ++(from_a ? a_lo : b_lo);
    } else {
      --(from_a ? a_hi : b_hi);
    }
  }

  // Layout.
  const size_t len_a = a_hi - a_lo;
  const size_t len_b = b_hi - b_lo;
  const size_t real = len_a + len_b + 3;
  const size_t L = static_cast<size_t>(config_.seq_len);
  CHECK_LE(real, L);
  out->tokens.assign(L, vocab_.pad);
  out->token_types.assign(L, 0);
  out->padding_mask.assign(L, 0);
  out->labels.assign(L, kIgnoreLabel);
  out->loss_mask.assign(L, 0);
  out->num_tokens = static_cast<int32_t>(real);
  size_t p = 0;
  out->tokens[p++] = vocab_.cls;
  for (size_t k = a_lo; k < a_hi; ++k) out->tokens[p++] = a[k];
  out->tokens[p++] = vocab_.sep;
  for (size_t k = b_lo; k < b_hi; ++k) {
    out->token_types[p] = 1;
    out->tokens[p++] = b[k];
  }
  out->token_types[p] = 1;
  out->tokens[p++] = vocab_.sep;
  std::fill(out->padding_mask.begin(), out->padding_mask.begin() + real, 1);

  // Masking.
  MaskedPositions masked;
  MaskTokens(absl::MakeSpan(out->tokens.data(), real), vocab_, config_.masking, &rng, &masked,
             trace);
  for (size_t m = 0; m < masked.positions.size(); ++m) {
    out->labels[masked.positions[m]] = masked.labels[m];
    out->loss_mask[masked.positions[m]] = 1;
  }
}

BertSample BertDataset::Sample(int64_t i) const {
  BertSample s;
  GetSample(i, &s);
  return s;
}

}  // namespace data
}  // namespace mt
