// The training data loader: micro-batches of token samples for one data-parallel rank, prepared
// ahead on a background thread, resumable from a consumed-samples count.
//
// Sample order (Megatron's MegatronPretrainingSampler): the loader walks the dataset's sample
// indices in order from consumed_samples, in micro-steps of micro_batch_size * dp_size samples.
// In each micro-step, DP rank r takes the contiguous slice
//   [step_start + r * micro_batch_size, step_start + (r + 1) * micro_batch_size),
// so the ranks' slices are disjoint and together cover the micro-step; accumulation_steps
// consecutive micro-steps make one global batch of
//   global_batch_size = micro_batch_size * dp_size * accumulation_steps
// samples. (Randomness comes from the dataset's own shuffle_index, not from the loader.) Only
// complete global batches are produced: the samples after the last full one are dropped.
//
// Resumption: a loader created with consumed_samples = k yields exactly the micro-batches that an
// uninterrupted loader yields after its first k samples (k must be a multiple of
// micro_batch_size * dp_size, i.e. a micro-step boundary; checkpoints store k at a global batch
// boundary). Batches are a pure function of (dataset, config), whatever the prefetch depth.
#ifndef MT_DATA_LOADER_LOADER_H_
#define MT_DATA_LOADER_LOADER_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "core/tensor.h"
#include "data/gpt_dataset/gpt_dataset.h"

namespace mt {
namespace data {

// Where samples come from: num_samples() samples of sample_length() token ids each (for language
// modelling, seq_len + 1). GetSample is called from the loader's background thread, so it must be
// safe to call concurrently with the owner's own calls (a const, read-only implementation is).
class TokenSampleSource {
 public:
  virtual ~TokenSampleSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t sample_length() const = 0;
  // Writes sample i (0 <= i < num_samples()) into out (size sample_length()).
  virtual void GetSample(int64_t i, absl::Span<int32_t> out) const = 0;
};

// The samples of a GptDataset (shuffled, seq_len + 1 tokens each).
std::shared_ptr<const TokenSampleSource> GptSampleSource(std::shared_ptr<const GptDataset> dataset);

struct LoaderConfig {
  int64_t micro_batch_size = 1;   // Samples per micro-batch on one rank.
  int64_t global_batch_size = 1;  // Samples per optimizer step over all ranks.
  int64_t data_parallel_size = 1;
  int64_t data_parallel_rank = 0;
  int64_t consumed_samples = 0;  // Samples (all ranks) consumed before this loader starts.
  int64_t prefetch_depth = 2;    // Micro-batches prepared ahead; 0 = prepare in Next().

  // InvalidArgument naming the field: sizes < 1, rank outside [0, data_parallel_size),
  // global_batch_size not a multiple of micro_batch_size * data_parallel_size, consumed_samples
  // negative or not a multiple of micro_batch_size * data_parallel_size, prefetch_depth < 0.
  absl::Status Validate() const;
};

// How a run's samples divide into micro-steps: each takes micro_batch_size samples on each of the
// data_parallel_size ranks; accumulation_steps of them make one global batch (an optimizer step);
// only complete global batches are used. For a config that passed Validate().
struct StepPlan {
  StepPlan(const LoaderConfig& config, int64_t num_samples)
      : samples_per_step(config.micro_batch_size * config.data_parallel_size),
        accumulation_steps(config.global_batch_size / samples_per_step),
        end_samples(num_samples / config.global_batch_size * config.global_batch_size),
        first_step(config.consumed_samples / samples_per_step),
        global_batch_size(config.global_batch_size) {}
  // Complete global batches (counted from sample 0).
  int64_t num_iterations() const { return end_samples / global_batch_size; }

  int64_t samples_per_step;    // micro_batch_size * data_parallel_size.
  int64_t accumulation_steps;  // Micro-steps per global batch.
  int64_t end_samples;         // Samples in complete global batches.
  int64_t first_step;          // The micro-step that consumed_samples resumes at.
  int64_t global_batch_size;
};

struct MicroBatch {
  int64_t iteration = 0;         // Global batch (optimizer step) this micro-batch belongs to.
  int64_t micro_step = 0;        // Its position in that global batch, [0, accumulation_steps).
  int64_t consumed_samples = 0;  // Samples consumed by all ranks once this micro-step is done.
  std::vector<int64_t> sample_indices;  // [micro_batch_size] dataset indices of the rows.
  Tensor inputs;                        // i32 [micro_batch_size, sample_length - 1]: tokens [0, T).
  Tensor labels;                        // i32 [micro_batch_size, sample_length - 1]: tokens [1, T].
};

// Not thread-safe: one consumer calls Next(). Destroying the loader stops and joins the prefetch
// thread, even while it is blocked on a full queue.
class Loader {
 public:
  // InvalidArgument for a bad config (Validate), a source with sample_length() < 2, or
  // consumed_samples beyond the source's num_samples().
  static absl::StatusOr<std::unique_ptr<Loader>> Create(
      std::shared_ptr<const TokenSampleSource> source, const LoaderConfig& config);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // The next micro-batch for this rank, or nullopt after the last complete global batch.
  std::optional<MicroBatch> Next();

  int64_t accumulation_steps() const { return plan_.accumulation_steps; }
  // Complete global batches in the source (counted from sample 0).
  int64_t num_iterations() const { return plan_.num_iterations(); }

 private:
  Loader(std::shared_ptr<const TokenSampleSource> source, const LoaderConfig& config);
  // Builds micro-step `step` (counted from sample 0).
  MicroBatch Make(int64_t step) const;
  void PrefetchLoop();

  const std::shared_ptr<const TokenSampleSource> source_;
  const LoaderConfig config_;
  const StepPlan plan_;
  int64_t next_step_ = 0;  // The next micro-step to hand out (no prefetch thread).

  // Prefetch state.
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable not_full_;
  std::condition_variable not_empty_;
  std::deque<MicroBatch> queue_;  // Guarded by mu_.
  bool producer_done_ = false;    // Guarded by mu_.
  bool stop_ = false;             // Guarded by mu_.
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_LOADER_LOADER_H_
