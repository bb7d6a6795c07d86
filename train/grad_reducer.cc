#include "train/grad_reducer.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace train {

GradReducer::GradReducer(const nn::ParameterStore* store, int64_t bucket_elements, bool overlap)
    : store_(store), overlap_(overlap) {
  CHECK_GE(bucket_elements, 1);
  const int64_t n = store->NumLocalElements();
  for (int64_t end = n; end > 0; end -= bucket_elements) {
    buckets_.push_back({std::max<int64_t>(0, end - bucket_elements), end});
  }
}

GradReducer::GradReducer(const nn::ParameterStore* store,
                         std::vector<std::pair<int64_t, int64_t>> buckets, bool overlap,
                         ReduceBucket reduce)
    : store_(store), overlap_(overlap), buckets_(std::move(buckets)), reduce_(std::move(reduce)) {}

nn::GradReadyListener* GradReducer::Begin(comm::Communicator* dp) {
  CHECK(finished_) << "GradReducer::Begin before the previous iteration's Finish";
  dp_ = dp != nullptr && dp->size() > 1 ? dp : nullptr;
  next_ = 0;
  deferred_.clear();
  started_in_backward_ = 0;
  finished_ = false;
  return dp_ != nullptr && overlap_ ? this : nullptr;
}

absl::StatusOr<std::unique_ptr<comm::CommRequest>> GradReducer::Request(size_t bucket) {
  if (reduce_) return reduce_(bucket);
  const auto [begin, end] = buckets_[bucket];
  return dp_->AllReduceAsync(store_->flat_grads().Slice(begin, end), comm::ReduceOp::kSum);
}

// The non-blocking call waited for at once, not the blocking all-reduce: the same algorithm as the
// overlapped buckets (so both modes give the same sums by construction), and over a TCP link
// OpenMPI's blocking all-reduce of 2 ranks ran at half the link's rate in some runs, the
// non-blocking one at its full rate (docs/multinode.md).
absl::Status GradReducer::ReduceNow(size_t bucket) {
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> r, Request(bucket));
  return r->Wait();
}

absl::Status GradReducer::Start(size_t bucket) {
  ASSIGN_OR_RETURN(std::unique_ptr<comm::CommRequest> r, Request(bucket));
  pending_.push_back(std::move(r));
  return absl::OkStatus();
}

absl::Status GradReducer::GradsReady(int first_handle) {
  if (finished_ || dp_ == nullptr) return absl::OkStatus();
  if (first_handle < 0 || first_handle >= store_->size()) {
    return absl::InternalError(absl::StrCat("GradReducer: no parameter handle ", first_handle));
  }
  // Pointer arithmetic only (the buffer may live on a device).
  const int64_t ready_from =
      store_->grad(first_handle).data_as<float>() - store_->flat_grads().data_as<float>();
  for (; next_ < buckets_.size() && buckets_[next_].first >= ready_from; ++next_) {
    const auto [begin, end] = buckets_[next_];
    if (held_.first < held_.second && begin < held_.second && held_.first < end) {
      deferred_.push_back(next_);
      continue;
    }
    RETURN_IF_ERROR(Start(next_));
    if (first_handle > 0) ++started_in_backward_;  // Handle 0: backward has ended.
  }
  for (auto& r : pending_) {
    if (!r->done()) RETURN_IF_ERROR(r->Test().status());
  }
  return absl::OkStatus();
}

absl::Status GradReducer::Finish() {
  if (finished_) return absl::OkStatus();
  finished_ = true;
  if (dp_ == nullptr) return absl::OkStatus();
  absl::Status status;
  if (overlap_) {
    for (size_t i = 0; status.ok() && i < deferred_.size(); ++i) status = Start(deferred_[i]);
    while (status.ok() && next_ < buckets_.size()) status = Start(next_++);
  } else {
    // Blocking all-reduces of the same buckets in the same order.
    for (; status.ok() && next_ < buckets_.size(); ++next_) status = ReduceNow(next_);
  }
  for (auto& r : pending_) {
    absl::Status s = r->Wait();
    if (status.ok()) status = s;
  }
  pending_.clear();
  return status;
}

}  // namespace train
}  // namespace mt
