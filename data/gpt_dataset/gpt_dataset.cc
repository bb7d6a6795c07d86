#include "data/gpt_dataset/gpt_dataset.h"

#include <cfenv>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/status.h"
#include "data/gpt_dataset/shuffle.h"
#include "glog/logging.h"

namespace mt {
namespace data {

namespace {

constexpr char kCacheMagic[8] = {'M', 'T', 'G', 'P', 'T', 'I', 'D', 'X'};
constexpr uint32_t kCacheVersion = 1;
constexpr int64_t kCacheHeaderWords = 8;

// Header words (after the 8-byte magic, which is word 0).
enum HeaderWord {
  kVersionWord = 1,
  kInputsHashWord = 2,
  kChecksumWord = 3,
  kEpochsWord = 4,
  kDocIndexLenWord = 5,
  kSamplesWord = 6,
  kSeqLenWord = 7,
};

uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

class Hasher {
 public:
  void Add(uint64_t w) { h_ = Mix(h_ ^ w); }
  void Add(absl::Span<const int64_t> words) {
    for (int64_t w : words) Add(static_cast<uint64_t>(w));
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 0;
};

}  // namespace

absl::string_view SplitName(Split split) {
  switch (split) {
    case Split::kTrain:
      return "train";
    case Split::kValid:
      return "valid";
    case Split::kTest:
      return "test";
  }
  return "?";
}

absl::StatusOr<std::array<int64_t, 4>> SplitDocuments(absl::string_view split,
                                                      int64_t num_documents) {
  auto error = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("split \"", split, "\": ", why));
  };
  if (num_documents < 0) return error("negative document count");
  std::vector<double> weights;
  for (absl::string_view part : absl::StrSplit(split, absl::ByAnyChar(",/"))) {
    double w;
    if (!absl::SimpleAtod(absl::StripAsciiWhitespace(part), &w) || !std::isfinite(w)) {
      return error(absl::StrCat("cannot parse weight \"", part, "\""));
    }
    if (w < 0) return error("weights must be non-negative");
    weights.push_back(w);
  }
  if (weights.size() > 3) return error("at most three weights (train, valid, test)");
  weights.resize(3, 0.0);
  const double sum = weights[0] + weights[1] + weights[2];
  if (!(sum > 0)) return error("the weights sum to 0");
  // Python's round() is round-half-to-even, which is nearbyint in the default rounding mode.
  CHECK_EQ(std::fegetround(), FE_TONEAREST);
  std::array<int64_t, 4> b = {0, 0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    const double share = weights[k] / sum;
    b[k + 1] =
        b[k] + static_cast<int64_t>(std::nearbyint(share * static_cast<double>(num_documents)));
  }
  const int64_t excess = b[3] - num_documents;
  for (int k = 1; k < 4; ++k) b[k] -= excess;
  for (int k = 0; k < 3; ++k) {
    if (b[k] < 0 || b[k] > b[k + 1]) {
      return error(absl::StrCat("rounding gives boundaries ", b[0], ",", b[1], ",", b[2], ",", b[3],
                                " for ", num_documents, " documents; adjust the weights"));
    }
  }
  return b;
}

absl::Status GptDatasetConfig::Validate() const {
  if (seq_len < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GptDatasetConfig.seq_len must be >= 1, got ", seq_len));
  }
  if (num_samples < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("GptDatasetConfig.num_samples must be >= 1, got ", num_samples));
  }
  if (num_samples >= (int64_t{1} << 62) / seq_len) {
    return absl::InvalidArgumentError(absl::StrCat("GptDatasetConfig: num_samples ", num_samples,
                                                   " x seq_len ", seq_len, " is too large"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<GptDataset>> GptDataset::Create(
    std::shared_ptr<const IndexedDataset> data, Split split, const GptDatasetConfig& config) {
  CHECK(data != nullptr);
  RETURN_IF_ERROR(config.Validate());
  const std::string what =
      absl::StrCat("GPT dataset ", data->prefix(), " (", SplitName(split), ")");
  if (!IsIntegerTokenDType(data->dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": token dtype ", TokenDTypeName(data->dtype()), " is not an integer type"));
  }
  ASSIGN_OR_RETURN(const auto bounds, SplitDocuments(config.split, data->num_documents()));
  std::unique_ptr<GptDataset> ds(new GptDataset());
  ds->data_ = std::move(data);
  ds->split_ = split;
  ds->seq_len_ = config.seq_len;
  ds->doc_begin_ = bounds[static_cast<int>(split)];
  ds->doc_end_ = bounds[static_cast<int>(split) + 1];
  if (ds->doc_begin_ == ds->doc_end_) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": split \"", config.split,
                                                   "\" gives it no documents (of ",
                                                   ds->data_->num_documents(), ")"));
  }

  Hasher inputs;
  inputs.Add(kCacheVersion);
  inputs.Add(static_cast<uint64_t>(ds->doc_begin_));
  inputs.Add(static_cast<uint64_t>(ds->doc_end_));
  for (int64_t d = ds->doc_begin_; d < ds->doc_end_; ++d) {
    const int64_t len = ds->data_->document_length(d);
    inputs.Add(static_cast<uint64_t>(len));
    ds->tokens_per_epoch_ += len;
  }
  inputs.Add(static_cast<uint64_t>(config.seq_len));
  inputs.Add(config.seed);
  inputs.Add(static_cast<uint64_t>(config.num_samples));
  if (ds->tokens_per_epoch_ == 0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": documents [", ds->doc_begin_, ", ",
                                                   ds->doc_end_, ") hold no tokens"));
  }
  // The smallest e with (e * tokens_per_epoch - 1) / seq_len >= num_samples.
  const int64_t needed = config.num_samples * config.seq_len + 1;
  ds->num_epochs_ = (needed + ds->tokens_per_epoch_ - 1) / ds->tokens_per_epoch_;
  ds->num_samples_ = (ds->num_epochs_ * ds->tokens_per_epoch_ - 1) / config.seq_len;

  const std::string name =
      absl::StrCat("_", SplitName(split), "_", config.num_samples, "ns_", config.seq_len, "sl_",
                   config.seed, "s_", ds->doc_begin_, "-", ds->doc_end_, "docs.gptidx");
  if (config.cache_dir.empty()) {
    ds->cache_path_ = absl::StrCat(ds->data_->prefix(), name);
  } else {
    const std::string& prefix = ds->data_->prefix();
    const size_t slash = prefix.rfind('/');
    const std::string base = slash == std::string::npos ? prefix : prefix.substr(slash + 1);
    ds->cache_path_ = absl::StrCat(config.cache_dir, "/", base, name);
  }

  const absl::Status loaded = ds->TryLoadCache(inputs.value());
  if (loaded.ok()) {
    ds->index_source_ = IndexSource::kLoadedFromCache;
    LOG(INFO) << what << ": loaded indices from " << ds->cache_path_;
    return ds;
  }
  if (!absl::IsNotFound(loaded)) {
    LOG(INFO) << what << ": rebuilding indices: " << loaded.message();
  }
  ds->Build(config.seed);
  ds->index_source_ = IndexSource::kBuilt;
  const absl::Status written = ds->WriteCache(inputs.value());
  if (written.ok()) {
    LOG(INFO) << what << ": built indices (" << ds->num_epochs_ << " epochs, " << ds->num_samples_
              << " samples), cached in " << ds->cache_path_;
  } else {
    LOG(WARNING) << what << ": built indices but could not cache them: " << written.message();
  }
  return ds;
}

void GptDataset::Build(uint64_t seed) {
  const int64_t num_docs = doc_end_ - doc_begin_;
  const int64_t L = num_epochs_ * num_docs;
  const int64_t S = num_samples_;
  owned_.assign(static_cast<size_t>(L + 2 * (S + 1) + S), 0);
  absl::Span<int64_t> doc_index(owned_.data(), L);
  absl::Span<int64_t> sample_index(owned_.data() + L, 2 * (S + 1));
  absl::Span<int64_t> shuffle_index(owned_.data() + L + 2 * (S + 1), S);

  std::mt19937_64 rng(seed);
  for (int64_t i = 0; i < L; ++i) doc_index[i] = doc_begin_ + i % num_docs;
  Shuffle(doc_index, &rng);

  // Walk the token stream: each sample takes seq_len + 1 tokens, and the next one starts at the
  // last of them. Row k records where sample k starts.
  int64_t pos = 0;     // Position in doc_index.
  int64_t offset = 0;  // Token offset in that document.
  sample_index[0] = 0;
  sample_index[1] = 0;
  for (int64_t k = 1; k <= S; ++k) {
    int64_t remaining = seq_len_ + 1;
    while (remaining != 0) {
      CHECK_LT(pos, L) << "ran out of documents building sample " << k;
      const int64_t available = data_->document_length(doc_index[pos]) - offset;
      remaining -= available;
      if (remaining <= 0) {
        offset += remaining + available - 1;  // The sample's last token.
        remaining = 0;
      } else {
        ++pos;
        offset = 0;
      }
    }
    sample_index[2 * k] = pos;
    sample_index[2 * k + 1] = offset;
  }

  std::iota(shuffle_index.begin(), shuffle_index.end(), int64_t{0});
  Shuffle(shuffle_index, &rng);

  document_index_ = doc_index;
  sample_index_ = sample_index;
  shuffle_index_ = shuffle_index;
}

absl::Status GptDataset::WriteCache(uint64_t inputs_hash) const {
  Hasher payload;
  payload.Add(document_index_);
  payload.Add(sample_index_);
  payload.Add(shuffle_index_);
  uint64_t header[kCacheHeaderWords] = {};
  std::memcpy(&header[0], kCacheMagic, 8);
  header[kVersionWord] = kCacheVersion;
  header[kInputsHashWord] = inputs_hash;
  header[kChecksumWord] = payload.value();
  header[kEpochsWord] = static_cast<uint64_t>(num_epochs_);
  header[kDocIndexLenWord] = document_index_.size();
  header[kSamplesWord] = static_cast<uint64_t>(num_samples_);
  header[kSeqLenWord] = static_cast<uint64_t>(seq_len_);
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicOutputFile> out, AtomicOutputFile::Create(cache_path_));
  RETURN_IF_ERROR(out->Append(header, sizeof(header)));
  RETURN_IF_ERROR(out->Append(owned_.data(), owned_.size() * sizeof(int64_t)));
  return out->Commit();
}

absl::Status GptDataset::TryLoadCache(uint64_t inputs_hash) {
  ASSIGN_OR_RETURN(MappedFile file, MappedFile::Open(cache_path_));
  auto stale = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat(cache_path_, ": ", why));
  };
  const int64_t L = num_epochs_ * (doc_end_ - doc_begin_);
  const int64_t S = num_samples_;
  const int64_t words = kCacheHeaderWords + L + 2 * (S + 1) + S;
  if (file.size() < kCacheHeaderWords * sizeof(uint64_t)) return stale("shorter than its header");
  const uint64_t* header = reinterpret_cast<const uint64_t*>(file.data());
  if (std::memcmp(header, kCacheMagic, 8) != 0) return stale("bad magic");
  if (header[kVersionWord] != kCacheVersion) return stale("another format version");
  if (header[kInputsHashWord] != inputs_hash) return stale("built from other inputs");
  if (header[kEpochsWord] != static_cast<uint64_t>(num_epochs_) ||
      header[kDocIndexLenWord] != static_cast<uint64_t>(L) ||
      header[kSamplesWord] != static_cast<uint64_t>(S) ||
      header[kSeqLenWord] != static_cast<uint64_t>(seq_len_)) {
    return stale("header counts do not match");
  }
  if (file.size() != static_cast<size_t>(words) * sizeof(int64_t)) return stale("wrong size");
  const int64_t* body = reinterpret_cast<const int64_t*>(file.data()) + kCacheHeaderWords;
  absl::Span<const int64_t> doc_index(body, L);
  absl::Span<const int64_t> sample_index(body + L, 2 * (S + 1));
  absl::Span<const int64_t> shuffle_index(body + L + 2 * (S + 1), S);
  Hasher payload;
  payload.Add(doc_index);
  payload.Add(sample_index);
  payload.Add(shuffle_index);
  if (payload.value() != header[kChecksumWord]) return stale("checksum mismatch");
  // Range checks, so that even a forged file cannot make GetSample read out of bounds.
  for (int64_t d : doc_index) {
    if (d < doc_begin_ || d >= doc_end_) return stale("document id out of range");
  }
  for (int64_t k = 0; k <= S; ++k) {
    const int64_t pos = sample_index[2 * k];
    const int64_t offset = sample_index[2 * k + 1];
    if (pos < 0 || pos >= L || offset < 0 || offset > data_->document_length(doc_index[pos])) {
      return stale("sample index out of range");
    }
  }
  for (int64_t s : shuffle_index) {
    if (s < 0 || s >= S) return stale("shuffle index out of range");
  }
  cache_ = std::move(file);
  document_index_ = doc_index;
  sample_index_ = sample_index;
  shuffle_index_ = shuffle_index;
  return absl::OkStatus();
}

void GptDataset::GetSample(int64_t i, absl::Span<int32_t> out) const {
  CHECK(i >= 0 && i < num_samples_)
      << "sample " << i << " out of range [0, " << num_samples_ << ")";
  CHECK_EQ(static_cast<int64_t>(out.size()), sample_length());
  const int64_t k = shuffle_index_[i];
  const int64_t first_pos = sample_index_[2 * k];
  const int64_t first_offset = sample_index_[2 * k + 1];
  const int64_t last_pos = sample_index_[2 * k + 2];
  const int64_t last_offset = sample_index_[2 * k + 3];
  size_t written = 0;
  auto emit = [&](const TokenView& tokens) {
    CHECK_LE(written + tokens.size(), out.size()) << "corrupt sample index at sample " << k;
    tokens.CopyTo(out.subspan(written, tokens.size()));
    written += tokens.size();
  };
  for (int64_t pos = first_pos; pos <= last_pos; ++pos) {
    const TokenView doc = data_->document(document_index_[pos]);
    const int64_t begin = pos == first_pos ? first_offset : 0;
    const int64_t end = pos == last_pos ? last_offset + 1 : doc.size();
    CHECK(begin <= end && end <= doc.size()) << "corrupt sample index at sample " << k;
    emit(doc.Subview(begin, end - begin));
  }
  CHECK_EQ(written, out.size()) << "corrupt sample index at sample " << k;
}

std::vector<int32_t> GptDataset::Sample(int64_t i) const {
  std::vector<int32_t> out(sample_length());
  GetSample(i, absl::MakeSpan(out));
  return out;
}

}  // namespace data
}  // namespace mt
