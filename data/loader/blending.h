// Weighted dataset blending, as Megatron-LM's `--data_path 0.3 A 0.7 B`: one stream of samples
// drawn from several datasets in proportion to their weights, in a fixed interleaved order.
//
// The order (Megatron's blending index): sample i of the blend comes from the dataset whose
// share of the first i samples falls furthest behind its weight, i.e. argmax over d of
// w[d] * max(i, 1) - taken[d] (the first such d on ties), and is that dataset's next sample
// (taken[d], counted from 0). So after any prefix of n samples, dataset d has given within two
// samples of w[d] * n, and the order depends on the weights and the sample count alone: a resumed
// run sees the same samples (the loaders resume by consumed-samples count).
#ifndef MT_DATA_LOADER_BLENDING_H_
#define MT_DATA_LOADER_BLENDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/loader/bert_loader.h"
#include "data/loader/loader.h"

namespace mt {
namespace data {

struct DataPathEntry {
  double weight = 1;  // Normalised: the entries' weights sum to 1.
  std::string prefix;
};

// Parses a --data_path value: "PREFIX" (one dataset, weight 1) or "W1 PREFIX1 W2 PREFIX2 ..."
// (whitespace-separated pairs; weights finite and > 0, normalised to sum to 1). InvalidArgument
// naming the bad token for anything else (an odd count, a weight that is not a number).
absl::StatusOr<std::vector<DataPathEntry>> ParseDataPath(absl::string_view data_path);

class BlendingIndex {
 public:
  // weights: >= 1 entries, finite and > 0 (normalised here); num_samples >= 0. CHECKs.
  BlendingIndex(std::vector<double> weights, int64_t num_samples);

  int64_t num_samples() const { return static_cast<int64_t>(dataset_.size()); }
  int num_datasets() const { return static_cast<int>(weights_.size()); }
  // Which dataset sample i of the blend comes from, and which of its samples it is.
  int dataset(int64_t i) const { return dataset_[i]; }
  int64_t dataset_sample(int64_t i) const { return dataset_sample_[i]; }
  // The samples dataset d must provide: Megatron's ceil(1.005 * w[d] * num_samples), and at
  // least as many as the index takes from it.
  int64_t samples_needed(int d) const { return needed_[d]; }

 private:
  std::vector<double> weights_;
  std::vector<int32_t> dataset_;
  std::vector<int64_t> dataset_sample_;
  std::vector<int64_t> needed_;
};

// A blend of token sources (GPT samples): sources[d] must hold index.samples_needed(d) samples
// of one common sample_length. InvalidArgument otherwise.
absl::StatusOr<std::shared_ptr<const TokenSampleSource>> BlendSources(
    std::vector<std::shared_ptr<const TokenSampleSource>> sources,
    std::shared_ptr<const BlendingIndex> index);

// The same for BERT samples (one common seq_len).
absl::StatusOr<std::shared_ptr<const BertSampleSource>> BlendSources(
    std::vector<std::shared_ptr<const BertSampleSource>> sources,
    std::shared_ptr<const BlendingIndex> index);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_LOADER_BLENDING_H_
