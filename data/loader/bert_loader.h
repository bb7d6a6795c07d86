// The BERT training data loader: micro-batches of BertDataset samples for one data-parallel rank,
// with exactly the sample order, DP slicing and resumption of data::Loader (loader.h): micro-step
// s covers samples [s * micro_batch_size * dp_size, (s + 1) * micro_batch_size * dp_size), DP
// rank r takes the contiguous slice [start + r * micro_batch_size, start + (r + 1) *
// micro_batch_size), accumulation_steps micro-steps make one global batch, only complete global
// batches are produced, and a loader created with consumed_samples = k yields what an
// uninterrupted one yields after its first k samples. Batches are built synchronously in Next()
// (a BERT sample costs little next to the model step; no prefetch thread).
#ifndef MT_DATA_LOADER_BERT_LOADER_H_
#define MT_DATA_LOADER_BERT_LOADER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "data/bert_dataset/bert_dataset.h"
#include "data/loader/loader.h"

namespace mt {
namespace data {

struct BertMicroBatch {
  int64_t iteration = 0;         // Global batch this micro-batch belongs to.
  int64_t micro_step = 0;        // Its position in that global batch, [0, accumulation_steps).
  int64_t consumed_samples = 0;  // Samples consumed by all ranks once this micro-step is done.
  std::vector<int64_t> sample_indices;  // [micro_batch_size] dataset indices of the rows.
  Tensor tokens;                        // i32 [micro_batch_size, seq_len]
  Tensor token_types;                   // i32 [micro_batch_size, seq_len]
  Tensor padding_mask;                  // i32 [micro_batch_size, seq_len]: 1 real token, 0 [PAD]
  Tensor mlm_labels;  // i32 [micro_batch_size, seq_len]: original id where masked, else -100
  Tensor sop_labels;  // i32 [micro_batch_size]
};

// Where BERT samples come from: a BertDataset, or a blend of several (blending.h).
class BertSampleSource {
 public:
  virtual ~BertSampleSource() = default;
  virtual int64_t num_samples() const = 0;
  virtual int64_t seq_len() const = 0;
  // Writes sample i (0 <= i < num_samples()) into *out, reusing its buffers.
  virtual void GetSample(int64_t i, BertSample* out) const = 0;
};

// The samples of a BertDataset.
std::shared_ptr<const BertSampleSource> BertDatasetSource(
    std::shared_ptr<const BertDataset> dataset);

// Not thread-safe: one consumer calls Next().
class BertLoader {
 public:
  // InvalidArgument for a null source, a bad config (LoaderConfig::Validate; prefetch_depth is
  // ignored) or consumed_samples beyond the source's num_samples().
  static absl::StatusOr<std::unique_ptr<BertLoader>> Create(
      std::shared_ptr<const BertSampleSource> source, const LoaderConfig& config);
  // The same over BertDatasetSource(dataset).
  static absl::StatusOr<std::unique_ptr<BertLoader>> Create(
      std::shared_ptr<const BertDataset> dataset, const LoaderConfig& config);

  // The next micro-batch for this rank, or nullopt after the last complete global batch.
  std::optional<BertMicroBatch> Next();

  int64_t accumulation_steps() const { return plan_.accumulation_steps; }
  // Complete global batches in the dataset (counted from sample 0).
  int64_t num_iterations() const { return plan_.num_iterations(); }

 private:
  BertLoader(std::shared_ptr<const BertSampleSource> source, const LoaderConfig& config);

  const std::shared_ptr<const BertSampleSource> dataset_;
  const LoaderConfig config_;
  const StepPlan plan_;
  int64_t next_step_ = 0;  // The next micro-step to hand out.
  BertSample scratch_;
};

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_LOADER_BERT_LOADER_H_
