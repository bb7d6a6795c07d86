// The process layout of a tensor-parallel x data-parallel job, and the object that holds a rank's
// communicators for it.
//
// Layout (REFERENCE.md section 3, Megatron's order): tensor-parallel ranks are consecutive, i.e.
// TP varies fastest. With world size W and TP degree T (D = W / T data-parallel replicas):
//   TP group g (g in [0, D)) = ranks [g*T, g*T + 1, ..., g*T + T - 1]   tp_rank = rank % T
//   DP group j (j in [0, T)) = ranks [j, j + T, j + 2T, ..., j + (D-1)T] dp_rank = rank / T
// e.g. W = 16, T = 2: TP groups [0,1], [2,3], ..., [14,15]; DP groups [0,2,...,14], [1,3,...,15].
// Launch T consecutive ranks per node (mpirun's default by-slot mapping does this) so that TP
// traffic stays on the fast intra-node links and DP traffic crosses nodes.
//
// Pipeline parallelism is reserved: the degree is part of the config and must be 1 for now.
#ifndef MT_COMM_PARALLEL_CONTEXT_H_
#define MT_COMM_PARALLEL_CONTEXT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace mt {
namespace comm {

struct ParallelConfig {
  // Ranks that split each layer's weights (Megatron's --tensor-model-parallel-size).
  int tensor_parallel = 1;
  // Reserved for pipeline parallelism; must be 1.
  int pipeline_parallel = 1;

  // InvalidArgument unless: world_size >= 1, tensor_parallel >= 1, pipeline_parallel >= 1,
  // tensor_parallel * pipeline_parallel divides world_size, num_attention_heads >= 1,
  // tensor_parallel <= num_attention_heads and divides it (each rank holds whole heads).
  // Unimplemented if pipeline_parallel > 1. Messages name the offending values.
  absl::Status Validate(int world_size, int num_attention_heads) const;
  // "tp=2 pp=1".
  std::string DebugString() const;
};

// Which ranks form which groups: a pure function of (world size, config), no communication.
struct ParallelLayout {
  int world_size = 1;
  int tp_size = 1;  // T
  int dp_size = 1;  // D = world_size / T
  // tp_groups[g] lists the world ranks of TP group g in tp_rank order (D groups of T ranks).
  std::vector<std::vector<int>> tp_groups;
  // dp_groups[j] lists the world ranks of DP group j in dp_rank order (T groups of D ranks).
  std::vector<std::vector<int>> dp_groups;

  // For a world rank in [0, world_size).
  int TpRank(int rank) const { return rank % tp_size; }
  int DpRank(int rank) const { return rank / tp_size; }
  int TpGroupOf(int rank) const { return rank / tp_size; }
  int DpGroupOf(int rank) const { return rank % tp_size; }
};

// Validates (ParallelConfig::Validate) and builds the layout.
absl::StatusOr<ParallelLayout> MakeParallelLayout(int world_size, const ParallelConfig& config,
                                                  int num_attention_heads);

// One rank's view of the layout: the world communicator (not owned) and this rank's TP and DP
// communicators (owned, split from the world, same backend). Not thread-safe, like communicators.
class ParallelContext {
 public:
  // Collective over `world`: every rank must call it with the same config and heads. Errors from
  // validation are identical on every rank, so all ranks fail together before any communication.
  // `world` must outlive the context.
  static absl::StatusOr<std::unique_ptr<ParallelContext>> Create(Communicator& world,
                                                                 const ParallelConfig& config,
                                                                 int num_attention_heads);

  const ParallelLayout& layout() const { return layout_; }
  int world_size() const { return world_->size(); }
  int rank() const { return world_->rank(); }
  int tp_size() const { return layout_.tp_size; }
  int tp_rank() const { return tp_->rank(); }
  int dp_size() const { return layout_.dp_size; }
  int dp_rank() const { return dp_->rank(); }

  Communicator& world() const { return *world_; }
  // The ranks this rank shares a layer's shards with (f/g all-reduces, gathers).
  Communicator& tp() const { return *tp_; }
  // The replicas of this rank's shard (gradient all-reduce).
  Communicator& dp() const { return *dp_; }

  // "rank 3 of 8: tp 1 of 2 (group [2,3]), dp 1 of 4 (group [1,3,5,7])".
  std::string DebugString() const;

 private:
  ParallelContext() = default;
  Communicator* world_ = nullptr;
  ParallelLayout layout_;
  std::unique_ptr<Communicator> tp_;
  std::unique_ptr<Communicator> dp_;
};

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_PARALLEL_CONTEXT_H_
