#include "data/loader/bert_loader.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"

namespace mt {
namespace data {

namespace {

class DatasetSource : public BertSampleSource {
 public:
  explicit DatasetSource(std::shared_ptr<const BertDataset> dataset)
      : dataset_(std::move(dataset)) {}
  int64_t num_samples() const override { return dataset_->num_samples(); }
  int64_t seq_len() const override { return dataset_->seq_len(); }
  void GetSample(int64_t i, BertSample* out) const override { dataset_->GetSample(i, out); }

 private:
  const std::shared_ptr<const BertDataset> dataset_;
};

}  // namespace

std::shared_ptr<const BertSampleSource> BertDatasetSource(
    std::shared_ptr<const BertDataset> dataset) {
  if (dataset == nullptr) return nullptr;
  return std::make_shared<DatasetSource>(std::move(dataset));
}

absl::StatusOr<std::unique_ptr<BertLoader>> BertLoader::Create(
    std::shared_ptr<const BertDataset> dataset, const LoaderConfig& config) {
  return Create(BertDatasetSource(std::move(dataset)), config);
}

absl::StatusOr<std::unique_ptr<BertLoader>> BertLoader::Create(
    std::shared_ptr<const BertSampleSource> dataset, const LoaderConfig& config) {
  if (dataset == nullptr) return absl::InvalidArgumentError("BertLoader: dataset is null");
  LoaderConfig c = config;
  c.prefetch_depth = 0;
  RETURN_IF_ERROR(c.Validate());
  if (c.consumed_samples > dataset->num_samples()) {
    return absl::InvalidArgumentError(absl::StrCat("BertLoader: consumed_samples ",
                                                   c.consumed_samples, " exceeds the dataset's ",
                                                   dataset->num_samples(), " samples"));
  }
  return std::unique_ptr<BertLoader>(new BertLoader(std::move(dataset), c));
}

BertLoader::BertLoader(std::shared_ptr<const BertSampleSource> dataset, const LoaderConfig& config)
    : dataset_(std::move(dataset)),
      config_(config),
      plan_(config, dataset_->num_samples()),
      next_step_(plan_.first_step) {}

std::optional<BertMicroBatch> BertLoader::Next() {
  const int64_t start = next_step_ * plan_.samples_per_step;
  if (start + plan_.samples_per_step > plan_.end_samples) return std::nullopt;
  const int64_t B = config_.micro_batch_size;
  const int64_t T = dataset_->seq_len();
  BertMicroBatch mb;
  mb.iteration = start / config_.global_batch_size;
  mb.micro_step = next_step_ % plan_.accumulation_steps;
  mb.consumed_samples = start + plan_.samples_per_step;
  mb.tokens = Tensor::Host({B, T}, DType::kI32);
  mb.token_types = Tensor::Host({B, T}, DType::kI32);
  mb.padding_mask = Tensor::Host({B, T}, DType::kI32);
  mb.mlm_labels = Tensor::Host({B, T}, DType::kI32);
  mb.sop_labels = Tensor::Host({B}, DType::kI32);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = start + config_.data_parallel_rank * B + b;
    mb.sample_indices.push_back(i);
    dataset_->GetSample(i, &scratch_);
    std::copy(scratch_.tokens.begin(), scratch_.tokens.end(), mb.tokens.data_as<int32_t>() + b * T);
    std::copy(scratch_.token_types.begin(), scratch_.token_types.end(),
              mb.token_types.data_as<int32_t>() + b * T);
    std::copy(scratch_.padding_mask.begin(), scratch_.padding_mask.end(),
              mb.padding_mask.data_as<int32_t>() + b * T);
    std::copy(scratch_.labels.begin(), scratch_.labels.end(),
              mb.mlm_labels.data_as<int32_t>() + b * T);
    mb.sop_labels.data_as<int32_t>()[b] = scratch_.sop_label;
  }
  ++next_step_;
  return mb;
}

}  // namespace data
}  // namespace mt
