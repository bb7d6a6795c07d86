// The data-parallel gradient all-reduce, in buckets, overlapped with the backward pass.
//
// The flat gradient buffer (nn::ParameterStore::flat_grads) is cut into buckets of at most
// `bucket_elements` elements, counted from its END: parameters are declared in forward order and
// backward finishes them in reverse, so the last bucket's gradients are final first. During the
// last micro-batch's backward of an iteration the models report, layer by layer, which gradients
// are final (nn::GradReadyListener); every bucket that lies wholly in the final range is then
// all-reduced with a non-blocking collective while backward goes on, and the pending requests are
// polled at each report to keep them moving. Finish() starts whatever is left and waits for all.
// Without overlap (or with one DP rank) Finish() does all buckets itself, in the same order and
// with the same boundaries, so both ways produce the same sums.
//
// The distributed optimizer (train/distributed_optimizer.h) gives its own buckets and a function
// that starts one's non-blocking reduce-scatter; it is called at the same points and its
// requests are polled and waited for like the all-reduces.
#ifndef MT_TRAIN_GRAD_REDUCER_H_
#define MT_TRAIN_GRAD_REDUCER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "nn/context.h"
#include "nn/parameter.h"

namespace mt {
namespace train {

class GradReducer : public nn::GradReadyListener {
 public:
  // The store must be allocated and outlive the reducer. bucket_elements >= 1.
  GradReducer(const nn::ParameterStore* store, int64_t bucket_elements, bool overlap);
  // Buckets [begin, end) given in the order to reduce them (from the end of the buffer), each
  // reduced by the request `reduce(index)` starts instead of an all-reduce (collective over the
  // `dp` of Begin).
  using ReduceBucket =
      std::function<absl::StatusOr<std::unique_ptr<comm::CommRequest>>(size_t index)>;
  GradReducer(const nn::ParameterStore* store, std::vector<std::pair<int64_t, int64_t>> buckets,
              bool overlap, ReduceBucket reduce);

  // Buckets overlapping the flat elements [begin, end) are not started from GradsReady but by
  // Finish (the later buckets still start as they become ready): the distributed optimizer under
  // pipeline parallelism holds back the tied word embedding, whose gradient must first be summed
  // across the embedding group. Replaces an earlier hold; begin == end holds nothing.
  void Hold(int64_t begin, int64_t end) { held_ = {begin, end}; }

  // Starts an iteration's reduction over `dp` (null or size 1: nothing to reduce). Returns the
  // listener to put in the StepContext of the iteration's LAST backward pass (earlier micro-batches
  // still accumulate), or null when buckets are not to be overlapped.
  nn::GradReadyListener* Begin(comm::Communicator* dp);

  // nn::GradReadyListener: starts every bucket whose elements are all at or after the flat offset
  // of `first_handle` (except held ones), then polls the pending ones.
  absl::Status GradsReady(int first_handle) override;

  // Starts the buckets not yet started, waits for all of them: on return every gradient is the sum
  // over the DP ranks. Idempotent until the next Begin().
  absl::Status Finish();

  // Buckets of the last iteration started from GradsReady while backward still had parameters
  // to finish (before the report for handle 0, which comes at its end).
  int64_t buckets_started_in_backward() const { return started_in_backward_; }
  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

 private:
  // Bucket `bucket`'s reduction, started: reduce_(bucket), or a non-blocking all-reduce.
  absl::StatusOr<std::unique_ptr<comm::CommRequest>> Request(size_t bucket);
  absl::Status Start(size_t bucket);
  // Blocking: Request(bucket) waited for at once.
  absl::Status ReduceNow(size_t bucket);

  const nn::ParameterStore* store_;
  bool overlap_;
  std::vector<std::pair<int64_t, int64_t>> buckets_;  // [begin, end), from the end of the buffer.
  ReduceBucket reduce_;                               // Empty: all-reduce.
  comm::Communicator* dp_ = nullptr;
  size_t next_ = 0;  // Buckets [0, next_) have been started or deferred.
  std::pair<int64_t, int64_t> held_ = {0, 0};
  std::vector<size_t> deferred_;  // Held buckets passed over by GradsReady, for Finish.
  std::vector<std::unique_ptr<comm::CommRequest>> pending_;
  int64_t started_in_backward_ = 0;
  bool finished_ = true;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_GRAD_REDUCER_H_
