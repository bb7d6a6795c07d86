#include "train/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/alloc.h"
#include "core/ops/elementwise.h"
#include "core/ops/reduce.h"
#include "core/status.h"
#include "glog/logging.h"

namespace mt {
namespace train {

std::vector<std::pair<int64_t, int64_t>> ShardLayout::Ranges() const {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const ShardBucket& b : buckets) out.push_back({b.begin, b.end});
  return out;
}

ShardLayout PartitionBuckets(int64_t num_elements, int64_t bucket_elements, int dp_size,
                             int dp_rank) {
  CHECK_GE(num_elements, 0);
  CHECK_GE(bucket_elements, 1);
  CHECK_GE(dp_size, 1);
  CHECK(dp_rank >= 0 && dp_rank < dp_size);
  const int64_t p = dp_size;
  const int64_t size = (bucket_elements + p - 1) / p * p;
  const int64_t remainder = num_elements % p;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t end = num_elements; end > remainder; end -= size) {
    ranges.push_back({std::max(remainder, end - size), end});
  }
  if (remainder > 0) ranges.push_back({0, remainder});
  ShardLayout layout;
  for (const auto& [begin, end] : ranges) {
    ShardBucket b;
    b.begin = begin;
    b.end = end;
    b.padded = (end - begin + p - 1) / p * p;
    const int64_t part = b.padded / p;
    b.part_begin = begin + dp_rank * part;
    b.part_end = std::max(b.part_begin, std::min(end, b.part_begin + part));
    b.shard_offset = layout.shard_elements;
    layout.shard_elements += part;
    layout.buckets.push_back(b);
  }
  return layout;
}

ShardLayout PartitionSegments(const std::vector<std::pair<int64_t, int64_t>>& segments,
                              int64_t bucket_elements, int dp_size, int dp_rank) {
  ShardLayout layout;
  for (auto it = segments.rbegin(); it != segments.rend(); ++it) {
    CHECK(it->first <= it->second && (it + 1 == segments.rend() || (it + 1)->second <= it->first))
        << "segments must be sorted and disjoint";
    const ShardLayout one =
        PartitionBuckets(it->second - it->first, bucket_elements, dp_size, dp_rank);
    for (ShardBucket b : one.buckets) {
      b.begin += it->first;
      b.end += it->first;
      b.part_begin += it->first;
      b.part_end += it->first;
      b.shard_offset += layout.shard_elements;
      layout.buckets.push_back(b);
    }
    layout.shard_elements += one.shard_elements;
  }
  return layout;
}

absl::StatusOr<std::unique_ptr<DistributedOptimizerState>> DistributedOptimizerState::Create(
    nn::ParameterStore* store, int64_t bucket_elements, comm::Communicator* dp,
    const std::vector<std::pair<int64_t, int64_t>>& segments) {
  CHECK(dp != nullptr && dp->size() >= 1);
  std::unique_ptr<DistributedOptimizerState> s(new DistributedOptimizerState());
  s->store_ = store;
  s->dp_ = dp;
  s->layout_ =
      segments.empty()
          ? PartitionBuckets(store->NumLocalElements(), bucket_elements, dp->size(), dp->rank())
          : PartitionSegments(segments, bucket_elements, dp->size(), dp->rank());
  for (const ShardBucket& b : s->layout_.buckets) {
    s->largest_part_ = std::max(s->largest_part_, b.padded / dp->size());
    // The parameters this part overlaps, in flat order (the store lays them out contiguously).
    for (int h = 0; h < store->size(); ++h) {
      const int64_t begin = std::max(b.part_begin, store->offset(h));
      const int64_t end =
          std::min(b.part_end, store->offset(h) + NumElements(store->local_shape(h)));
      if (begin < end) {
        s->pieces_.push_back({h, begin, end, b.shard_offset + (begin - b.part_begin)});
      }
    }
  }
  ExecContext on_device;
  on_device.device = store->device();
  ASSIGN_OR_RETURN(Tensor part, AllocZeros(on_device, {s->largest_part_}, DType::kF32));
  s->parts_.push_back(std::move(part));
  s->free_parts_.push_back(0);
  // A padded bucket (at most one per segment) has reduce-scatter staging of its own, as several
  // may be pending at once.
  s->reduce_staging_.resize(s->layout_.buckets.size());
  for (size_t i = 0; i < s->layout_.buckets.size(); ++i) {
    const ShardBucket& b = s->layout_.buckets[i];
    if (b.padded == b.end - b.begin) continue;
    ASSIGN_OR_RETURN(s->reduce_staging_[i], AllocZeros(on_device, {dp->size()}, DType::kF32));
    s->padded_ = true;
  }
  if (s->padded_) {
    ASSIGN_OR_RETURN(s->gather_staging_, AllocZeros(on_device, {dp->size()}, DType::kF32));
  }
  return s;
}

TensorView DistributedOptimizerState::Padded(const ShardBucket& b, const TensorView& flat,
                                             const Tensor& staging) const {
  if (b.padded == b.end - b.begin) return flat.Slice(b.begin, b.end);
  return staging.view().Slice(0, b.padded);
}

// A bucket's reduce-scatter: completes the communicator's request, then lands the part. If the
// collective fails, its part buffer is not returned to the pool (the job ends; a collective that
// failed on a device may still write to it).
class DistributedOptimizerState::LandingRequest final : public comm::CommRequest {
 public:
  LandingRequest(DistributedOptimizerState* state, size_t index, size_t slot,
                 std::unique_ptr<comm::CommRequest> inner, std::string label)
      : CommRequest(std::move(label)),
        state_(state),
        index_(index),
        slot_(slot),
        inner_(std::move(inner)) {}
  ~LandingRequest() override { WaitIfPending(); }

 protected:
  absl::StatusOr<bool> DoTest() override {
    ASSIGN_OR_RETURN(const bool complete, inner_->Test());
    if (!complete) return false;
    RETURN_IF_ERROR(state_->Land(index_, slot_));
    return true;
  }
  absl::Status DoWait() override {
    RETURN_IF_ERROR(inner_->Wait());
    return state_->Land(index_, slot_);
  }

 private:
  DistributedOptimizerState* state_;
  size_t index_, slot_;
  std::unique_ptr<comm::CommRequest> inner_;
};

absl::StatusOr<std::unique_ptr<comm::CommRequest>> DistributedOptimizerState::ReduceScatterBucket(
    size_t index) {
  CHECK_LT(index, layout_.buckets.size());
  const ShardBucket& b = layout_.buckets[index];
  const TensorView grads = store_->flat_grads();
  ExecContext ctx;
  ctx.device = store_->device();
  const TensorView in = Padded(b, grads, reduce_staging_[index]);
  if (in.data != grads.Slice(b.begin, b.end).data) {  // The padded bucket (zeros after the data).
    RETURN_IF_ERROR(CopyTensor(ctx, grads.Slice(b.begin, b.end), in.Slice(0, b.end - b.begin)));
  }
  if (free_parts_.empty()) {
    ASSIGN_OR_RETURN(Tensor part, AllocZeros(ctx, {largest_part_}, DType::kF32));
    parts_.push_back(std::move(part));
    free_parts_.push_back(parts_.size() - 1);
  }
  const size_t slot = free_parts_.back();
  free_parts_.pop_back();
  const TensorView part = parts_[slot].view().Slice(0, b.padded / dp_->size());
  absl::StatusOr<std::unique_ptr<comm::CommRequest>> inner =
      dp_->ReduceScatterAsync(in, part, comm::ReduceOp::kSum);
  if (!inner.ok()) {
    free_parts_.push_back(slot);
    return inner.status();
  }
  return std::unique_ptr<comm::CommRequest>(new LandingRequest(
      this, index, slot, std::move(inner).value(), "reduce-scatter of gradient bucket"));
}

absl::Status DistributedOptimizerState::Land(size_t index, size_t slot) {
  const ShardBucket& b = layout_.buckets[index];
  free_parts_.push_back(slot);
  if (b.part_end == b.part_begin) return absl::OkStatus();
  ExecContext ctx;
  ctx.device = store_->device();
  return CopyTensor(ctx, parts_[slot].view().Slice(0, b.part_end - b.part_begin),
                    store_->flat_grads().Slice(b.part_begin, b.part_end));
}

absl::StatusOr<double> DistributedOptimizerState::OwnedSum(
    bool first_tp_rank, int skip_handle, CopySum copy, bool grads,
    const std::function<absl::StatusOr<double>(const TensorView&)>& fn) const {
  double sum = 0;
  for (const Piece& p : pieces_) {
    if (store_->spec(p.handle).split_dim < 0 && !first_tp_rank) continue;  // On TP rank 0.
    if (p.handle == skip_handle && copy == CopySum::kLeaveOut) continue;
    ASSIGN_OR_RETURN(double s,
                     fn(grads ? store_->flat_grads().Slice(p.begin, p.end) : OwnedMasters(p)));
    sum += (p.handle != skip_handle || !std::isfinite(s)) ? s : 0.0;
  }
  return sum;
}

TensorView DistributedOptimizerState::OwnedMasters(const Piece& p) const {
  if (masters_sharded_) {
    return master_.view().Slice(p.shard_offset, p.shard_offset + (p.end - p.begin));
  }
  return store_->flat_values().Slice(p.begin, p.end);
}

absl::Status DistributedOptimizerState::Update(const ExecContext& ctx, const ops::AdamArgs& args,
                                               const TensorView& m, const TensorView& v) const {
  const TensorView grads = store_->flat_grads();
  for (const Piece& p : pieces_) {
    ops::AdamArgs a = args;
    if (!store_->spec(p.handle).weight_decay) a.weight_decay = 0.0f;
    const int64_t n = p.end - p.begin;
    RETURN_IF_ERROR(ops::AdamUpdate(ctx, OwnedMasters(p), grads.Slice(p.begin, p.end),
                                    m.Slice(p.shard_offset, p.shard_offset + n),
                                    v.Slice(p.shard_offset, p.shard_offset + n), a));
  }
  return absl::OkStatus();
}

absl::Status DistributedOptimizerState::ShardMasters(const ExecContext& ctx, bool release) {
  const DType dtype = store_->compute_dtype();
  if (masters_sharded_ || dtype == DType::kF32) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DistributedOptimizerState::ShardMasters: ",
        masters_sharded_ ? "already sharded" : "an f32 compute dtype reads the masters whole"));
  }
  ASSIGN_OR_RETURN(master_, AllocZeros(ctx, {layout_.shard_elements}, DType::kF32));
  RETURN_IF_ERROR(Scatter(ctx, store_->flat_values(), master_.view()));
  ASSIGN_OR_RETURN(compute_part_, AllocZeros(ctx, {largest_part_}, dtype));
  if (padded_) {
    ASSIGN_OR_RETURN(compute_staging_, AllocZeros(ctx, {dp_->size()}, dtype));
  }
  if (release) RETURN_IF_ERROR(store_->ReleaseMasters(ctx));
  masters_sharded_ = true;
  return absl::OkStatus();
}

absl::Status DistributedOptimizerState::AllGatherParts(const ExecContext& ctx,
                                                       const TensorView& flat,
                                                       const Tensor& part_buffer,
                                                       const Tensor& staging) {
  for (const ShardBucket& b : layout_.buckets) {
    const TensorView part = part_buffer.view().Slice(0, b.padded / dp_->size());
    if (b.part_end > b.part_begin) {
      RETURN_IF_ERROR(CopyTensor(ctx, flat.Slice(b.part_begin, b.part_end),
                                 part.Slice(0, b.part_end - b.part_begin)));
    }
    const TensorView out = Padded(b, flat, staging);
    RETURN_IF_ERROR(dp_->AllGather(part, out));
    if (out.data != flat.Slice(b.begin, b.end).data) {
      RETURN_IF_ERROR(CopyTensor(ctx, out.Slice(0, b.end - b.begin), flat.Slice(b.begin, b.end)));
    }
  }
  return absl::OkStatus();
}

absl::Status DistributedOptimizerState::GatherKeptMasters(const ExecContext& ctx) {
  const TensorView kept = store_->flat_kept_values();
  if (kept.numel() == 0) return absl::OkStatus();
  // The kept masters are all-reduced whole: this state must cover every kept parameter, or none
  // (the expert-parallel state of an optimizer: experts have no f32_compute parameters).
  bool covers_some = false, covers_all = true;
  for (int h = 0; h < store_->size(); ++h) {
    if (!store_->spec(h).f32_compute) continue;
    const bool covered = Covers(store_->offset(h));
    covers_some = covers_some || covered;
    covers_all = covers_all && covered;
  }
  if (!covers_some) return absl::OkStatus();
  CHECK(covers_all) << "the f32_compute parameters are split between distributed states";
  // In place: each kept element is owned by exactly one rank and the others add zeros, so the
  // sum is exact.
  RETURN_IF_ERROR(SetZero(ctx, kept));
  for (const Piece& p : pieces_) {
    if (!store_->spec(p.handle).f32_compute) continue;
    const TensorView& v = store_->value(p.handle);
    const TensorView flat(v.data, {v.numel()}, DType::kF32, v.device);
    const int64_t at = p.begin - store_->offset(p.handle);
    RETURN_IF_ERROR(CopyTensor(ctx, OwnedMasters(p), flat.Slice(at, at + (p.end - p.begin))));
  }
  return dp_->AllReduce(kept, comm::ReduceOp::kSum);
}

absl::Status DistributedOptimizerState::GatherWeights(const ExecContext& ctx) {
  if (!masters_sharded_) {
    return AllGatherParts(ctx, store_->flat_values(), parts_[0], gather_staging_);
  }
  // The compute copies of the owned elements, rounded as RefreshComputeWeights rounds
  // (elementwise), then everyone's.
  const TensorView copies = store_->flat_compute_values();
  for (const Piece& p : pieces_) {
    RETURN_IF_ERROR(ops::Convert(ctx, OwnedMasters(p), copies.Slice(p.begin, p.end)));
  }
  RETURN_IF_ERROR(AllGatherParts(ctx, copies, compute_part_, compute_staging_));
  return GatherKeptMasters(ctx);
}

absl::Status DistributedOptimizerState::GatherToHost(const ExecContext& ctx,
                                                     const TensorView& shard,
                                                     const TensorView& host_flat) const {
  const absl::Status flat_ok = store_->CheckHostFlat("GatherToHost", host_flat);
  CHECK(flat_ok.ok()) << flat_ok;
  int64_t largest = 0;
  for (const ShardBucket& b : layout_.buckets) largest = std::max(largest, b.padded);
  ASSIGN_OR_RETURN(Tensor bucket, Alloc(ctx, {largest}, DType::kF32));
  for (const ShardBucket& b : layout_.buckets) {
    const int64_t part = b.padded / dp_->size();
    const TensorView out = bucket.view().Slice(0, b.padded);
    RETURN_IF_ERROR(dp_->AllGather(shard.Slice(b.shard_offset, b.shard_offset + part), out));
    RETURN_IF_ERROR(
        CopyTensor(ctx, out.Slice(0, b.end - b.begin), host_flat.Slice(b.begin, b.end)));
  }
  return absl::OkStatus();
}

absl::Status DistributedOptimizerState::GatherToRoot(const ExecContext& ctx,
                                                     const TensorView& shard,
                                                     const TensorView& host_flat) const {
  const int p = dp_->size();
  if (dp_->rank() != 0) {
    for (const ShardBucket& b : layout_.buckets) {
      RETURN_IF_ERROR(
          dp_->Send(shard.Slice(b.shard_offset, b.shard_offset + b.padded / p), /*peer=*/0));
    }
    return absl::OkStatus();
  }
  // A wrong buffer is the caller's bug, and an error returned here would leave the senders
  // blocked in their Sends: CHECK.
  const absl::Status flat_ok = store_->CheckHostFlat("GatherToRoot", host_flat);
  CHECK(flat_ok.ok()) << flat_ok;
  // The messages arrive on the device the senders' shards live on (a NCCL communicator moves
  // device memory between devices and host memory through MPI: both ends must agree).
  ASSIGN_OR_RETURN(Tensor received, Alloc(ctx, {largest_part_}, DType::kF32));
  for (const ShardBucket& b : layout_.buckets) {
    const int64_t part = b.padded / p;
    for (int r = 0; r < p; ++r) {
      const int64_t begin = b.begin + r * part, end = std::min(b.end, begin + part);
      TensorView from = shard.Slice(b.shard_offset, b.shard_offset + part);
      if (r > 0) {
        from = received.view().Slice(0, part);
        RETURN_IF_ERROR(dp_->Recv(from, r));
      }
      if (end > begin) {
        RETURN_IF_ERROR(CopyTensor(ctx, from.Slice(0, end - begin), host_flat.Slice(begin, end)));
      }
    }
  }
  return absl::OkStatus();
}

bool DistributedOptimizerState::Covers(int64_t offset) const {
  for (const ShardBucket& b : layout_.buckets) {
    if (offset >= b.begin && offset < b.end) return true;
  }
  return false;
}

absl::Status DistributedOptimizerState::Scatter(const ExecContext& ctx, const TensorView& flat,
                                                const TensorView& shard) const {
  for (const ShardBucket& b : layout_.buckets) {
    if (b.part_end == b.part_begin) continue;
    const int64_t n = b.part_end - b.part_begin;
    RETURN_IF_ERROR(CopyTensor(ctx, flat.Slice(b.part_begin, b.part_end),
                               shard.Slice(b.shard_offset, b.shard_offset + n)));
  }
  return absl::OkStatus();
}

}  // namespace train
}  // namespace mt
