// The process layout of a tensor-parallel x context-parallel x data-parallel x pipeline-parallel
// job, and the object that holds a rank's communicators for it.
//
// Layout (Megatron's order): TP varies fastest, then CP, then DP, then PP. With world size W, TP
// degree T, CP degree C and PP degree P (D = W / (T * C * P) data-parallel replicas):
//   rank = tp_rank + T * (cp_rank + C * (dp_rank + D * pp_rank))
//   TP group    = the T consecutive ranks with the same cp, dp, pp rank
//   CP group    = the C ranks with the same tp, dp, pp rank (stride T)
//   DP group    = the D ranks with the same tp, cp, pp rank (stride T*C)
//   DP x CP     = the D*C ranks with the same tp, pp rank (the gradient all-reduce with CP > 1)
//   PP group    = the P ranks with the same tp, cp, dp rank (stride T*C*D)
// Groups are numbered by the ranks of the dimensions they do not span, fastest first (a CP group
// by tp + T*(dp + D*pp), a DP group by tp + T*(cp + C*pp), ...), and list their ranks in order.
// e.g. W = 16, T = 2, C = 1, P = 1: TP groups [0,1], [2,3], ..., [14,15]; DP groups [0,2,...,14],
// [1,3,...,15]. W = 8, T = 2, P = 2: TP [0,1] [2,3] [4,5] [6,7]; DP [0,2] [1,3] [4,6] [5,7];
// PP [0,4] [1,5] [2,6] [3,7]. W = 8, T = 2, C = 2: TP [0,1] [2,3] [4,5] [6,7]; CP [0,2] [1,3]
// [4,6] [5,7]; DP [0,4] [1,5] [2,6] [3,7]; DP x CP [0,2,4,6] [1,3,5,7]. Launch T consecutive
// ranks per node (mpirun's default by-slot mapping does this) so that TP traffic stays on the
// fast intra-node links.
//
// Context parallelism (models/context_parallel.h) splits each sample's sequence into 2C chunks;
// CP rank i holds chunks i and 2C-1-i. The ranks of a CP group see the same data (they share a
// dp_rank) and hold the same weights; their gradients are partial sums over the sequence, summed
// over DP x CP.
//
// Pipeline stage s (= pp_rank) sends its activations to stage s + 1 and receives their gradients
// back. The embedding group of a pipeline group is its first and last stage (which both hold the
// tied word embedding and all-reduce its gradient); with P = 1 it is the rank alone, and a middle
// stage's is the rank alone too (it holds no embedding).
#ifndef MT_COMM_PARALLEL_CONTEXT_H_
#define MT_COMM_PARALLEL_CONTEXT_H_

#include <cstdint>
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
  // Pipeline stages (Megatron's --pipeline-model-parallel-size).
  int pipeline_parallel = 1;
  // Ranks that split each sample's sequence (Megatron's --context-parallel-size).
  int context_parallel = 1;

  // InvalidArgument unless: world_size >= 1, tensor_parallel >= 1, pipeline_parallel >= 1,
  // context_parallel >= 1, tensor_parallel * context_parallel * pipeline_parallel divides
  // world_size, num_attention_heads >= 1,
  // tensor_parallel <= num_attention_heads and divides it (each rank holds whole heads).
  // Messages name the offending values. (How the layers split over the stages: PipelineSplit.)
  absl::Status Validate(int world_size, int num_attention_heads) const;
  // "tp=2 cp=1 pp=1".
  std::string DebugString() const;
};

// InvalidArgument (naming the flags) unless context_parallel >= 1 splits seq_length >= 1 into
// 2 * context_parallel chunks of equal length, each divisible by `tensor_parallel` when
// `sequence_parallel` (context_parallel 1: any length).
absl::Status ValidateContextParallelSequence(int context_parallel, int64_t seq_length,
                                             int tensor_parallel, bool sequence_parallel);

// Which ranks form which groups: a pure function of (world size, config), no communication.
struct ParallelLayout {
  int world_size = 1;
  int tp_size = 1;  // T
  int cp_size = 1;  // C
  int dp_size = 1;  // D = world_size / (T * C * P)
  int pp_size = 1;  // P
  // tp_groups[g] lists the world ranks of TP group g in tp_rank order (C*D*P groups of T ranks).
  std::vector<std::vector<int>> tp_groups;
  // cp_groups[k] lists the world ranks of CP group k in cp_rank order (T*D*P groups of C ranks).
  std::vector<std::vector<int>> cp_groups;
  // dp_groups[j] lists the world ranks of DP group j in dp_rank order (T*C*P groups of D ranks).
  std::vector<std::vector<int>> dp_groups;
  // dp_cp_groups[j] lists the world ranks of DP x CP group j in rank order (T*P groups of D*C).
  std::vector<std::vector<int>> dp_cp_groups;
  // pp_groups[i] lists the world ranks of PP group i in pp_rank (stage) order (T*C*D groups of P).
  std::vector<std::vector<int>> pp_groups;

  // For a world rank in [0, world_size).
  int TpRank(int rank) const { return rank % tp_size; }
  int CpRank(int rank) const { return (rank / tp_size) % cp_size; }
  int DpRank(int rank) const { return (rank / (tp_size * cp_size)) % dp_size; }
  int PpRank(int rank) const { return rank / (tp_size * cp_size * dp_size); }
  int TpGroupOf(int rank) const { return rank / tp_size; }
  int CpGroupOf(int rank) const {
    return TpRank(rank) + tp_size * (DpRank(rank) + dp_size * PpRank(rank));
  }
  int DpGroupOf(int rank) const {
    return TpRank(rank) + tp_size * (CpRank(rank) + cp_size * PpRank(rank));
  }
  int DpCpGroupOf(int rank) const { return TpRank(rank) + tp_size * PpRank(rank); }
  int PpGroupOf(int rank) const { return rank % (tp_size * cp_size * dp_size); }
  // The world ranks of `rank`'s embedding group: its pipeline group's first and last stage when
  // `rank` is one of them and P > 1; {rank} otherwise.
  std::vector<int> EmbeddingGroupOf(int rank) const;
};

// How a model's layers split over P pipeline stages, each holding V model chunks (V > 1: the
// interleaved schedule's virtual stages, Narayanan et al. 2021). With L layers and c = L / (P*V)
// layers per chunk, chunk v of stage s holds layers [(v*P + s) * c, (v*P + s + 1) * c): the model
// runs through stage 0's chunk 0, stage 1's chunk 0, ..., stage P-1's chunk 0, stage 0's chunk 1...
struct PipelineSplit {
  int num_layers = 1;
  int stages = 1;          // P
  int virtual_stages = 1;  // V: model chunks per stage
  int layers_per_chunk() const { return num_layers / (stages * virtual_stages); }
  // The first layer of chunk `chunk` (in [0, V)) of stage `stage` (in [0, P)).
  int FirstLayer(int stage, int chunk) const {
    return (chunk * stages + stage) * layers_per_chunk();
  }
  // Whether that chunk holds the model's input embedding (the very first chunk) or its output
  // layer and loss (the very last).
  bool HoldsInput(int stage, int chunk) const { return stage == 0 && chunk == 0; }
  bool HoldsOutput(int stage, int chunk) const {
    return stage == stages - 1 && chunk == virtual_stages - 1;
  }
};

// InvalidArgument (naming the values and the flags) unless pipeline_parallel >= 1 divides
// num_layers >= 1 into whole stages; with layers_per_virtual_stage > 0 (Megatron's
// --num-layers-per-virtual-pipeline-stage; 0: none), unless pipeline_parallel >= 2 and each
// stage's layers divide into chunks of that many.
absl::StatusOr<PipelineSplit> MakePipelineSplit(int num_layers, int pipeline_parallel,
                                                int layers_per_virtual_stage);

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
  int cp_size() const { return layout_.cp_size; }
  int cp_rank() const { return cp_->rank(); }
  int dp_size() const { return layout_.dp_size; }
  int dp_rank() const { return dp_->rank(); }
  int pp_size() const { return layout_.pp_size; }
  int pp_rank() const { return pp_->rank(); }
  bool is_first_stage() const { return pp_rank() == 0; }
  bool is_last_stage() const { return pp_rank() == pp_size() - 1; }
  // The previous and next stage as ranks of pp() (for Send/Recv); -1 at the ends.
  int prev_stage() const { return is_first_stage() ? -1 : pp_rank() - 1; }
  int next_stage() const { return is_last_stage() ? -1 : pp_rank() + 1; }

  Communicator& world() const { return *world_; }
  // The ranks this rank shares a layer's shards with (f/g all-reduces, gathers).
  Communicator& tp() const { return *tp_; }
  // tp(), or null for TP = 1 (what nn::StepContext::tp takes: no collectives).
  Communicator* tp_or_null() const { return tp_size() > 1 ? tp_.get() : nullptr; }
  // The ranks that split this rank's sequences (ring attention), in cp_rank order.
  Communicator& cp() const { return *cp_; }
  // cp(), or null for CP = 1 (what nn::StepContext::cp takes).
  Communicator* cp_or_null() const { return cp_size() > 1 ? cp_.get() : nullptr; }
  // The replicas of this rank's shard that see other data (data loading, loss averaging).
  Communicator& dp() const { return *dp_; }
  // DP x CP: every rank holding this rank's shard (the gradient all-reduce and the optimizer's
  // group); dp() itself when CP = 1.
  Communicator& dp_cp() const { return cp_size() > 1 ? *dp_cp_ : *dp_; }
  // The stages of this rank's pipeline (same tp and dp rank), in stage order: activations and
  // gradients between stages, the loss and gradient norm reduced across stages.
  Communicator& pp() const { return *pp_; }
  // The first and last stage of this rank's pipeline (the tied word embedding's gradient
  // all-reduce); size 1 with P = 1 and on middle stages (ParallelLayout::EmbeddingGroupOf).
  Communicator& embedding() const { return *embedding_; }

  // "rank 3 of 8: tp 1 of 2 (group [2,3]), dp 1 of 2 (group [1,3]), pp 0 of 2 (group [3,7])"
  // (", cp 0 of 2 (group [..])" after tp with CP > 1).
  std::string DebugString() const;

 private:
  ParallelContext() = default;
  Communicator* world_ = nullptr;
  ParallelLayout layout_;
  std::unique_ptr<Communicator> tp_;
  std::unique_ptr<Communicator> cp_;
  std::unique_ptr<Communicator> dp_;
  std::unique_ptr<Communicator> dp_cp_;  // CP > 1 only.
  std::unique_ptr<Communicator> pp_;
  std::unique_ptr<Communicator> embedding_;
};

}  // namespace comm
}  // namespace mt

#endif  // MT_COMM_PARALLEL_CONTEXT_H_
