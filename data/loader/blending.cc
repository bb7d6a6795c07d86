#include "data/loader/blending.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "glog/logging.h"

namespace mt {
namespace data {

absl::StatusOr<std::vector<DataPathEntry>> ParseDataPath(absl::string_view data_path) {
  const std::vector<std::string> tokens =
      absl::StrSplit(data_path, absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  if (tokens.empty()) return absl::InvalidArgumentError("--data_path is empty");
  if (tokens.size() == 1) return std::vector<DataPathEntry>{{1.0, tokens[0]}};
  if (tokens.size() % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--data_path: expected one prefix or pairs of weight and prefix, got ",
                     tokens.size(), " words ('", data_path, "')"));
  }
  std::vector<DataPathEntry> entries;
  double sum = 0;
  for (size_t i = 0; i < tokens.size(); i += 2) {
    double w = 0;
    if (!absl::SimpleAtod(tokens[i], &w) || !std::isfinite(w) || w <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("--data_path: weight '", tokens[i],
                                                     "' (before '", tokens[i + 1],
                                                     "') must be a number > 0"));
    }
    entries.push_back({w, tokens[i + 1]});
    sum += w;
  }
  for (DataPathEntry& e : entries) e.weight /= sum;
  return entries;
}

BlendingIndex::BlendingIndex(std::vector<double> weights, int64_t num_samples)
    : weights_(std::move(weights)) {
  CHECK(!weights_.empty());
  CHECK_GE(num_samples, 0);
  double sum = 0;
  for (double w : weights_) {
    CHECK(std::isfinite(w) && w > 0) << w;
    sum += w;
  }
  for (double& w : weights_) w /= sum;
  const int n = num_datasets();
  std::vector<int64_t> taken(n, 0);
  dataset_.resize(num_samples);
  dataset_sample_.resize(num_samples);
  for (int64_t i = 0; i < num_samples; ++i) {
    const double at = static_cast<double>(std::max<int64_t>(i, 1));
    int best = 0;
    double best_error = weights_[0] * at - static_cast<double>(taken[0]);
    for (int d = 1; d < n; ++d) {
      const double error = weights_[d] * at - static_cast<double>(taken[d]);
      if (error > best_error) {
        best = d;
        best_error = error;
      }
    }
    dataset_[i] = best;
    dataset_sample_[i] = taken[best]++;
  }
  for (int d = 0; d < n; ++d) {
    const auto megatron =
        static_cast<int64_t>(std::ceil(1.005 * weights_[d] * static_cast<double>(num_samples)));
    needed_.push_back(std::max(megatron, taken[d]));
  }
}

namespace {

// Checks what both blends need: one non-null source per dataset of the index, each with enough
// samples, all of one length (`length` of a source).
template <typename Source, typename Length>
absl::Status CheckSources(const std::vector<std::shared_ptr<const Source>>& sources,
                          const BlendingIndex* index, Length length) {
  if (index == nullptr) return absl::InvalidArgumentError("blend: the index is null");
  if (static_cast<int>(sources.size()) != index->num_datasets()) {
    return absl::InvalidArgumentError(absl::StrCat("blend: ", sources.size(),
                                                   " sources for an index of ",
                                                   index->num_datasets(), " datasets"));
  }
  for (size_t d = 0; d < sources.size(); ++d) {
    if (sources[d] == nullptr) return absl::InvalidArgumentError("blend: a source is null");
    if (sources[d]->num_samples() < index->samples_needed(d)) {
      return absl::InvalidArgumentError(
          absl::StrCat("blend: dataset ", d, " holds ", sources[d]->num_samples(),
                       " samples, the blend needs ", index->samples_needed(d)));
    }
    if (length(*sources[d]) != length(*sources[0])) {
      return absl::InvalidArgumentError(absl::StrCat("blend: dataset ", d, "'s samples have ",
                                                     length(*sources[d]), " tokens, dataset 0's ",
                                                     length(*sources[0])));
    }
  }
  return absl::OkStatus();
}

// The sources and the index behind either blend; Source is the interface blended.
template <typename Source>
class Blended : public Source {
 public:
  Blended(std::vector<std::shared_ptr<const Source>> sources,
          std::shared_ptr<const BlendingIndex> index)
      : sources_(std::move(sources)), index_(std::move(index)) {}
  int64_t num_samples() const override { return index_->num_samples(); }

 protected:
  const Source& first() const { return *sources_[0]; }
  // The source sample i of the blend comes from; *j receives its index there.
  const Source& Locate(int64_t i, int64_t* j) const {
    *j = index_->dataset_sample(i);
    return *sources_[index_->dataset(i)];
  }

 private:
  const std::vector<std::shared_ptr<const Source>> sources_;
  const std::shared_ptr<const BlendingIndex> index_;
};

class BlendedTokens : public Blended<TokenSampleSource> {
 public:
  using Blended::Blended;
  int64_t sample_length() const override { return first().sample_length(); }
  void GetSample(int64_t i, absl::Span<int32_t> out) const override {
    int64_t j = 0;
    Locate(i, &j).GetSample(j, out);
  }
};

class BlendedBert : public Blended<BertSampleSource> {
 public:
  using Blended::Blended;
  int64_t seq_len() const override { return first().seq_len(); }
  void GetSample(int64_t i, BertSample* out) const override {
    int64_t j = 0;
    Locate(i, &j).GetSample(j, out);
  }
};

}  // namespace

absl::StatusOr<std::shared_ptr<const TokenSampleSource>> BlendSources(
    std::vector<std::shared_ptr<const TokenSampleSource>> sources,
    std::shared_ptr<const BlendingIndex> index) {
  absl::Status ok = CheckSources(sources, index.get(),
                                 [](const TokenSampleSource& s) { return s.sample_length(); });
  if (!ok.ok()) return ok;
  return std::make_shared<BlendedTokens>(std::move(sources), std::move(index));
}

absl::StatusOr<std::shared_ptr<const BertSampleSource>> BlendSources(
    std::vector<std::shared_ptr<const BertSampleSource>> sources,
    std::shared_ptr<const BlendingIndex> index) {
  absl::Status ok =
      CheckSources(sources, index.get(), [](const BertSampleSource& s) { return s.seq_len(); });
  if (!ok.ok()) return ok;
  return std::make_shared<BlendedBert>(std::move(sources), std::move(index));
}

}  // namespace data
}  // namespace mt
