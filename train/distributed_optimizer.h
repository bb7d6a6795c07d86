// The distributed optimizer (ZeRO stage 1, Megatron's --use_distributed_optimizer): the Adam
// moments are sharded over the data-parallel group instead of replicated on every DP rank.
//
// Layout. The flat gradient/parameter buffer of the store (nn::ParameterStore::flat_grads, N
// elements) is cut into buckets from its END, as the all-reducing GradReducer cuts it, so that
// reductions still start during backward (train/grad_reducer.h). Every bucket's length is a
// multiple of the DP size P: the elements [r, N) (r = N mod P) are cut into buckets of
// bucket_elements rounded up to a multiple of P (the frontmost one shorter, still a multiple of
// P), and the r < P elements [0, r), when r > 0, form one last bucket padded with zeros to P
// elements. Rank k of the group owns the contiguous k-th 1/P of every bucket (Megatron-core's
// per-bucket sharding: a bucket is one reduce-scatter); its shard is the concatenation of its
// parts in bucket order, sum(padded / P) elements on every rank, padding included.
//
// One step: each bucket of the flat gradients is reduce-scattered (summed) into this rank's part
// with a non-blocking collective, started during backward as today's all-reduce is; when it
// completes the part lands back in the flat gradient buffer at the part's own offsets (through a
// bucket-part buffer, since the communicator's in and out may not overlap), so the reduced
// gradients this rank owns sit where the unsharded optimizer would read them and the rest of the
// buffer is left unreduced. The optimizer (train/optimizer.h) then computes the global gradient
// norm from the owned elements (summed over DP, then over TP), runs the same AdamW kernel on the
// owned slices of the f32 masters with the sharded moments, and all-gathers the updated masters
// bucket by bucket, so every rank ends the step with the weights of the unsharded optimizer.
//
// What is sharded: the two Adam moments (8 bytes per parameter -> 8 / P) always. With a bf16/f16
// compute dtype the f32 masters too (4 bytes -> 4 / P; Megatron's layout): ShardMasters() takes
// this rank's shard of them and releases the store's whole master buffer
// (nn::ParameterStore::ReleaseMasters); each step then rounds the updated shard into the compute
// copies at the owned offsets and all-gathers the compute copies (2 bytes per parameter moved
// instead of 4), so every rank ends the step with the weights of the unsharded optimizer, bit for
// bit (the rounding is elementwise). The few parameters modules read in f32 (declared
// f32_compute: norm gains and biases, the MLM output bias) keep whole masters in the store, set
// after each step by an all-reduce of the owned elements over zeros (exact; a -0.0 would become
// +0.0, which no update produces in practice). Checkpoints collect the master shards on DP rank 0
// (GatherToRoot) as they collect the moments. With an f32 compute dtype the masters
// ARE the weights the modules read, so they stay whole and the all-gather moves them.
//
// Devices: everything lives on the store's device; the communicator must reach it.
#ifndef MT_TRAIN_DISTRIBUTED_OPTIMIZER_H_
#define MT_TRAIN_DISTRIBUTED_OPTIMIZER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/exec_context.h"
#include "core/ops/adam.h"
#include "core/tensor.h"
#include "nn/parameter.h"

namespace mt {
namespace train {

// One bucket of the flat buffer and this rank's part of it.
struct ShardBucket {
  int64_t begin = 0, end = 0;  // The bucket's elements [begin, end) of the flat buffer.
  int64_t padded = 0;          // end - begin rounded up to a multiple of the DP size.
  // This rank's part: [part_begin, part_begin + padded / P) of the zero-padded bucket, of which
  // [part_begin, part_end) are real elements (part_end <= end, or part_end == part_begin for a
  // part of padding only).
  int64_t part_begin = 0, part_end = 0;
  int64_t shard_offset = 0;  // Where the part starts in this rank's shard.
};

struct ShardLayout {
  std::vector<ShardBucket> buckets;  // From the end of the flat buffer to its start.
  int64_t shard_elements = 0;        // sum(padded / P): the same on every rank.
  // The buckets' [begin, end), in the same order (what GradReducer takes).
  std::vector<std::pair<int64_t, int64_t>> Ranges() const;
};

// The layout of `num_elements` (>= 0) over `dp_size` (>= 1) ranks for rank `dp_rank`, with
// buckets of at most `bucket_elements` (>= 1) rounded up to a multiple of dp_size (see the file
// comment). Pure arithmetic; CHECK-fails on arguments out of range.
ShardLayout PartitionBuckets(int64_t num_elements, int64_t bucket_elements, int dp_size,
                             int dp_rank);
// The layout of several segments [begin, end) of the flat buffer (sorted, disjoint): each laid
// out as PartitionBuckets lays out a buffer of its length, from the last segment to the first,
// the shard being the concatenation. Elements outside the segments belong to no bucket.
ShardLayout PartitionSegments(const std::vector<std::pair<int64_t, int64_t>>& segments,
                              int64_t bucket_elements, int dp_size, int dp_rank);

// How a sum over the parameters treats a copy that another pipeline stage counts (the last
// stage's tied word embedding): left out, or adding only a sum that is not finite, so that every
// stage sees an inf/NaN in it (and all skip the step) even where it arose after the copies' sum.
enum class CopySum { kLeaveOut, kOnlyNonfinite };

// This rank's share of the optimizer step over a store (see the file comment). Made by
// train::Optimizer for --use_distributed_optimizer; not thread-safe.
class DistributedOptimizerState {
 public:
  // The store must be allocated and outlive this; dp (size >= 1; one rank holds the whole state)
  // too. `segments`: the parts of the flat buffer this state covers (PartitionSegments), empty:
  // all of it. Expert parallelism gives the dense parameters' segments to a state over the DP
  // group and the experts' to one over the expert-data-parallel group (train/optimizer.h).
  // Allocates the bucket scratch on the store's device (ResourceExhausted/CUDA errors as
  // core/alloc.h).
  static absl::StatusOr<std::unique_ptr<DistributedOptimizerState>> Create(
      nn::ParameterStore* store, int64_t bucket_elements, comm::Communicator* dp,
      const std::vector<std::pair<int64_t, int64_t>>& segments = {});

  const ShardLayout& layout() const { return layout_; }
  comm::Communicator* dp() const { return dp_; }
  int64_t shard_elements() const { return layout_.shard_elements; }
  // Bucket-part buffers allocated so far (the most reduce-scatters pending at once, at least 1),
  // of part_buffer_elements() f32 each.
  int64_t part_buffers() const { return static_cast<int64_t>(parts_.size()); }
  int64_t part_buffer_elements() const { return largest_part_; }

  // Starts the reduce-scatter of bucket `index` (of layout().buckets) of the flat gradients
  // (non-blocking, comm::Communicator::ReduceScatterAsync); once the returned request has
  // completed, this rank's part of the bucket is the DP sum, in place. The bucket's gradients
  // must not change until then. Each pending request holds a part buffer of its own (allocated
  // the first time that many are pending, reused after). Collective over dp.
  absl::StatusOr<std::unique_ptr<comm::CommRequest>> ReduceScatterBucket(size_t index);

  // The sum of fn over the views of the reduced gradients (grads) or the f32 masters this rank
  // owns, over the parameters counted on this TP rank (replicated ones only when first_tp_rank);
  // parameter skip_handle (-1: none; a copy another pipeline stage counts) as `copy` says. Local.
  absl::StatusOr<double> OwnedSum(
      bool first_tp_rank, int skip_handle, CopySum copy, bool grads,
      const std::function<absl::StatusOr<double>(const TensorView&)>& fn) const;

  // AdamW on the owned elements of the f32 masters (the store's, or the shard), with the shard
  // moments m, v (f32 [shard_elements()]); args.weight_decay applies to the parameters whose
  // spec asks for it, 0 to the others. Local.
  absl::Status Update(const ExecContext& ctx, const ops::AdamArgs& args, const TensorView& m,
                      const TensorView& v) const;

  // Takes this rank's shard of the store's f32 masters and (release) releases the store's whole
  // buffer (see the file comment; a second state over other segments takes its shard first). For
  // a bf16/f16 compute dtype only; once. FailedPrecondition otherwise; allocation errors as
  // core/alloc.h. Local.
  absl::Status ShardMasters(const ExecContext& ctx, bool release = true);
  // Whether ShardMasters() ran: the masters live here, f32 [shard_elements()].
  bool masters_sharded() const { return masters_sharded_; }
  TensorView master_shard() const { return master_.view(); }

  // After Update(): every rank's updated weights everywhere. Masters whole: all-gathers the owned
  // masters into the store's flat master buffer (the compute copies are not refreshed). Masters
  // sharded: rounds the owned masters into the compute copies and all-gathers those, and sets
  // the store's kept f32 masters. Collective over dp.
  absl::Status GatherWeights(const ExecContext& ctx);

  // host_flat (f32 [N] in host memory, on every rank) <- the shard-layout tensors of every rank
  // (shard, f32 [shard_elements()], store device), padding dropped, bucket by bucket through a
  // bucket-sized buffer on the store's device (no whole copy on the device). Collective over dp.
  absl::Status GatherToHost(const ExecContext& ctx, const TensorView& shard,
                            const TensorView& host_flat) const;

  // On DP rank 0: host_flat (f32 [N] in host memory) <- every rank's shard-layout tensor (shard,
  // f32 [shard_elements()], store device), padding dropped; the other ranks send theirs, bucket
  // part by bucket part (point-to-point messages through a part-sized buffer on the store's
  // device), so no rank holds the whole tensor on its device; host_flat is ignored (may be
  // empty) there. Collective over dp.
  absl::Status GatherToRoot(const ExecContext& ctx, const TensorView& shard,
                            const TensorView& host_flat) const;

  // shard (f32 [shard_elements()], store device) <- this rank's elements of `flat` (f32 [N],
  // host or store device); padding left as it is. Local.
  absl::Status Scatter(const ExecContext& ctx, const TensorView& flat,
                       const TensorView& shard) const;

 private:
  // A run of owned elements inside one parameter: flat [begin, end), shard [shard_offset, ...).
  struct Piece {
    int handle;
    int64_t begin, end, shard_offset;
  };
  DistributedOptimizerState() = default;
  // The view the bucket is reduced/gathered through: the flat slice itself, or (the padded
  // bucket) `staging`.
  TensorView Padded(const ShardBucket& b, const TensorView& flat, const Tensor& staging) const;

  class LandingRequest;

  // The owned f32 masters of piece p: in the store's flat buffer, or in the shard.
  TensorView OwnedMasters(const Piece& p) const;
  // All-gathers bucket by bucket: this rank's part of `flat` (through `part`) into every rank's
  // `flat`, via `staging` for the padded bucket. Collective over dp.
  absl::Status AllGatherParts(const ExecContext& ctx, const TensorView& flat,
                              const Tensor& part_buffer, const Tensor& staging);
  // Masters sharded: the store's kept f32 masters from the owned pieces (all-reduced in place
  // over zeros).
  absl::Status GatherKeptMasters(const ExecContext& ctx);

  // Whether flat element `offset` is in one of the buckets.
  bool Covers(int64_t offset) const;
  // Copies bucket `index`'s reduced part from part buffer `slot` to the flat gradients and frees
  // the slot.
  absl::Status Land(size_t index, size_t slot);

  nn::ParameterStore* store_ = nullptr;
  comm::Communicator* dp_ = nullptr;
  ShardLayout layout_;
  std::vector<Piece> pieces_;
  int64_t largest_part_ = 0;  // max padded / P.
  // f32 [largest_part_] each: bucket parts (reduce-scatter out; [0] is also the all-gather in);
  // free_parts_ lists the ones no pending reduce-scatter holds.
  std::vector<Tensor> parts_;
  std::vector<size_t> free_parts_;
  // f32 [P] for each padded bucket (by bucket index; empty for the others), for its
  // reduce-scatter (only its real elements are ever written, so the padding stays zero), and
  // one for the all-gathers; padded_: whether any bucket is padded.
  std::vector<Tensor> reduce_staging_;
  Tensor gather_staging_;
  bool padded_ = false;
  // Masters sharded: the shard (f32 [shard_elements()]); a compute-dtype part buffer and padded
  // staging for the all-gather of the compute copies.
  bool masters_sharded_ = false;
  Tensor master_, compute_part_, compute_staging_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_DISTRIBUTED_OPTIMIZER_H_
