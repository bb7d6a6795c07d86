#include "data/loader/loader.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace data {

namespace {

class GptSamples : public TokenSampleSource {
 public:
  explicit GptSamples(std::shared_ptr<const GptDataset> dataset) : dataset_(std::move(dataset)) {}
  int64_t num_samples() const override { return dataset_->num_samples(); }
  int64_t sample_length() const override { return dataset_->sample_length(); }
  void GetSample(int64_t i, absl::Span<int32_t> out) const override { dataset_->GetSample(i, out); }

 private:
  std::shared_ptr<const GptDataset> dataset_;
};

absl::Status Invalid(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("LoaderConfig.", field, " ", why));
}

}  // namespace

std::shared_ptr<const TokenSampleSource> GptSampleSource(
    std::shared_ptr<const GptDataset> dataset) {
  CHECK(dataset != nullptr);
  return std::make_shared<GptSamples>(std::move(dataset));
}

absl::Status LoaderConfig::Validate() const {
  if (micro_batch_size < 1) {
    return Invalid("micro_batch_size", absl::StrCat("must be >= 1, got ", micro_batch_size));
  }
  if (data_parallel_size < 1) {
    return Invalid("data_parallel_size", absl::StrCat("must be >= 1, got ", data_parallel_size));
  }
  if (data_parallel_rank < 0 || data_parallel_rank >= data_parallel_size) {
    return Invalid("data_parallel_rank", absl::StrCat("must be in [0, ", data_parallel_size,
                                                      "), got ", data_parallel_rank));
  }
  const int64_t per_step = micro_batch_size * data_parallel_size;
  if (global_batch_size < 1 || global_batch_size % per_step != 0) {
    return Invalid("global_batch_size",
                   absl::StrCat(global_batch_size,
                                " must be a positive multiple of micro_batch_size x "
                                "data_parallel_size = ",
                                per_step));
  }
  if (consumed_samples < 0 || consumed_samples % per_step != 0) {
    return Invalid("consumed_samples", absl::StrCat(consumed_samples,
                                                    " must be a non-negative multiple of "
                                                    "micro_batch_size x data_parallel_size = ",
                                                    per_step));
  }
  if (prefetch_depth < 0) {
    return Invalid("prefetch_depth", absl::StrCat("must be >= 0, got ", prefetch_depth));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Loader>> Loader::Create(
    std::shared_ptr<const TokenSampleSource> source, const LoaderConfig& config) {
  CHECK(source != nullptr);
  RETURN_IF_ERROR(config.Validate());
  if (source->sample_length() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("Loader: samples of ", source->sample_length(),
                                                   " tokens; need at least 2 (input and label)"));
  }
  if (config.consumed_samples > source->num_samples()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Loader: consumed_samples ", config.consumed_samples, " exceeds the ",
        source->num_samples(), " samples of the dataset (resuming with another dataset?)"));
  }
  std::unique_ptr<Loader> loader(new Loader(std::move(source), config));
  if (config.prefetch_depth > 0)
    loader->thread_ = std::thread([l = loader.get()] { l->PrefetchLoop(); });
  return loader;
}

Loader::Loader(std::shared_ptr<const TokenSampleSource> source, const LoaderConfig& config)
    : source_(std::move(source)),
      config_(config),
      plan_(config, source_->num_samples()),
      next_step_(plan_.first_step) {}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  not_full_.notify_all();
  not_empty_.notify_all();
  if (thread_.joinable()) thread_.join();
}

MicroBatch Loader::Make(int64_t step) const {
  const int64_t B = config_.micro_batch_size;
  const int64_t L = source_->sample_length();
  const int64_t T = L - 1;
  MicroBatch batch;
  batch.iteration = step / plan_.accumulation_steps;
  batch.micro_step = step % plan_.accumulation_steps;
  batch.consumed_samples = (step + 1) * plan_.samples_per_step;
  batch.inputs = Tensor::Host({B, T}, DType::kI32);  // [B, T]
  batch.labels = Tensor::Host({B, T}, DType::kI32);  // [B, T]
  int32_t* inputs = batch.inputs.data_as<int32_t>();
  int32_t* labels = batch.labels.data_as<int32_t>();
  std::vector<int32_t> row(L);
  const int64_t first = step * plan_.samples_per_step + config_.data_parallel_rank * B;
  for (int64_t b = 0; b < B; ++b) {
    batch.sample_indices.push_back(first + b);
    source_->GetSample(first + b, absl::MakeSpan(row));
    std::memcpy(inputs + b * T, row.data(), T * sizeof(int32_t));
    std::memcpy(labels + b * T, row.data() + 1, T * sizeof(int32_t));
  }
  return batch;
}

void Loader::PrefetchLoop() {
  const int64_t end_step = plan_.end_samples / plan_.samples_per_step;
  for (int64_t step = next_step_; step < end_step; ++step) {
    MicroBatch batch = Make(step);  // Outside the lock: the consumer keeps going meanwhile.
    std::unique_lock<std::mutex> lock(mu_);
    not_full_.wait(lock, [this] {
      return stop_ || static_cast<int64_t>(queue_.size()) < config_.prefetch_depth;
    });
    if (stop_) return;
    queue_.push_back(std::move(batch));
    lock.unlock();
    not_empty_.notify_one();
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    producer_done_ = true;
  }
  not_empty_.notify_one();
}

std::optional<MicroBatch> Loader::Next() {
  if (config_.prefetch_depth == 0) {
    if (next_step_ * plan_.samples_per_step >= plan_.end_samples) return std::nullopt;
    return Make(next_step_++);
  }
  std::unique_lock<std::mutex> lock(mu_);
  not_empty_.wait(lock, [this] { return !queue_.empty() || producer_done_; });
  if (queue_.empty()) return std::nullopt;
  MicroBatch batch = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  not_full_.notify_one();
  return batch;
}

}  // namespace data
}  // namespace mt
