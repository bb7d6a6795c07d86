// Memory per rank of a training job, by pipeline stage: the parameters each rank holds (counted by
// declaring the stage's real model, as models/count.h does), the bytes of its weights, gradients
// and optimizer state as this stack keeps them, and its activations by the formulas of Korthikanti
// et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models", section 4) for
// tensor, sequence and pipeline parallelism and selective or full recomputation.
//
// Per parameter and rank: f32 master weights (4 B) plus, for bf16/f16 compute, the compute copy
// (2 B); f32 gradients (4 B); the two f32 Adam moments (8 B). The distributed optimizer divides
// the moments by DP, and with bf16/f16 compute the masters too (the few f32_compute parameters
// it keeps whole, norm gains and biases, are left out; docs/perf/distributed_optimizer.md).
//
// Activations of one transformer layer and one micro-batch, with e bytes per compute-dtype element,
// 1-byte dropout masks, s the sequence length, b the micro batch, h the hidden size, f the MLP
// width, a the heads and t the TP degree, as the paper counts a GeLU-MLP layer:
//   kept whole on every TP rank: (4 e + 2) s b h   (the two norms' inputs, the attention and MLP
//                                                   inputs, the two dropout masks)
//   split over TP:      (4 e + 2 e f / h) s b h / t (Q, K, V, the output projection's input, the
//                                                   MLP's GeLU input and output; with g key/value
//                                                   heads of d, K and V are e g d / h each: 2 e + 2
//                                                   e g d / h in place of the 4 e)
//   attention scores:   (2 e + 1) a s^2 b / t      (softmax output, its dropout mask and output)
// With e = 2 and f = 4 h this is the paper's s b h (10 + 24 / t + 5 a s / (h t)). Sequence
// parallelism divides the whole-kept part by t too; selective recomputation drops the scores; full
// recomputation keeps only each layer's input, e s b h (/ t with sequence parallelism). The first
// stage adds the input embedding's dropout mask (s b h, / t with SP) per micro-batch in flight,
// the last the final norm's and the output layer's inputs (2 e s b h, / t with SP) and the f32
// logits of the loss (4 s b V / t) for one micro-batch.
//
// What this stack's layers hold (StageMemory::held, what Model::activation_bytes().held measures
// after a forward): its fused attention keeps no s x s scores and recomputes dropout masks from
// their keys instead of storing them, but keeps the QKV projection both fused and split by head.
// Per GeLU-MLP layer (nn/transformer.h's TransformerLayer, nn/attention.h):
//   kept whole:  4 e s b h + 16 s b    (the two norms' outputs, the residual after the attention,
//                                       the branch before its dropout-add; two norms' f32 mean
//                                       and 1/sigma per position), / t with sequence parallelism
//   split:       e (4 h + 2 f) s b / t (the fused QKV output, the attention output before and
//                                       after its projection's layout change, the MLP's GeLU
//                                       input and output)
//   core:        4 e s b h / t + 4 a s b / t (Q, K, V and the context by head, the f32
//                                       log-sum-exp per head and position), 0 when selective
// where grouped-query attention (g key/value heads of d) makes K and V g d wide instead of h:
// 2 h + 2 g d in place of 4 h in both the split and the core terms;
// and 0 with full recomputation; the stack keeps its layers' inputs and output, (L + 1) e s b h
// per chunk (/ t with sequence parallelism).
//
// Micro-batches in flight on a stage: comm::PipelineInFlightMicroBatches over the schedule's ops
// (stage s of P keeps min(P - s, m) with one chunk). As Megatron, the pipeline keeps every
// in-flight micro-batch's activations, in a model chunk instance each (train/pipeline_schedule.h),
// and a chunk keeps as many instances as its own peak: with the interleaved schedule the chunks
// peak at different times, so a stage holds the sum of its chunks' peaks, more than its peak in
// flight (Megatron frees each micro-batch's activations after its backward and holds the peak).
#ifndef MT_MODELS_MEMORY_H_
#define MT_MODELS_MEMORY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/dtype.h"
#include "models/config.h"
#include "models/model.h"
#include "nn/transformer.h"

namespace mt {
namespace models {

struct MemoryOptions {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;
  int data_parallel = 1;
  int layers_per_virtual_stage = 0;  // 0: no interleaving.
  int64_t micro_batch = 1;
  int64_t seq_length = 0;     // 0: max_position_embeddings.
  int64_t micro_batches = 0;  // Per iteration and DP rank; 0: as many as the schedule can use.
  DType compute_dtype = DType::kF32;
  bool distributed_optimizer = false;
  bool sequence_parallel = false;
  // Context parallelism: each rank holds s / C positions of every sequence (every activation term
  // and the logits scale by 1 / C; the paper's attention scores become (s / C) x s).
  int context_parallel = 1;
  nn::Recompute recompute = nn::Recompute::kNo;
  int expert_parallel = 1;  // EP: each rank holds num_experts / EP of every layer's experts.

  // The fields //models:describe takes as flags, named as the drivers' (core/config_flags.h);
  // micro_batches and compute_dtype come from its --global_batch_size and --bf16 / --fp16.
  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("tensor_model_parallel_size", &self.tensor_parallel,
      "Tensor-parallel degree (TP) of the per-rank counts and memory.");
    v("pipeline_model_parallel_size", &self.pipeline_parallel,
      "Pipeline stages (PP) of the memory per rank.");
    v("data_parallel_size", &self.data_parallel,
      "Data-parallel ranks (DP) of the memory per rank.");
    v("num_layers_per_virtual_pipeline_stage", &self.layers_per_virtual_stage,
      "Layers per model chunk of the interleaved schedule (0: not interleaved).");
    v("micro_batch_size", &self.micro_batch, "Samples per micro-batch of the activation memory.");
    v("seq_length", &self.seq_length,
      "Sequence length of the FLOPs line and the memory (0: max_position_embeddings).");
    v("use_distributed_optimizer", &self.distributed_optimizer,
      "Adam moments sharded over the DP ranks.");
    v("sequence_parallel", &self.sequence_parallel, "Sequence parallelism (needs TP > 1).");
    v("context_parallel_size", &self.context_parallel,
      "Context-parallel ranks (CP): each holds 1/CP of every sequence's positions.");
    v("recompute_granularity", &self.recompute,
      "Activation recomputation: none, full or selective.", nn::kRecomputeNames);
    v("expert_model_parallel_size", &self.expert_parallel,
      "Expert-parallel ranks (EP, dividing DP and the experts) of a mixture of experts: each "
      "holds num_experts / EP of every layer's experts.");
  }
};

// One pipeline stage's rank (every TP and DP rank of a stage holds the same amounts).
struct StageMemory {
  // This rank's (its chunks, a tied embedding's copy included; with expert parallelism its own
  // experts: the parameters named "<...>.experts.<e>.<...>", as models/variants/moe names them).
  int64_t parameters = 0;
  double weights = 0;     // Bytes: f32 masters plus compute copies.
  double gradients = 0;   // Bytes: f32.
  double optimizer = 0;   // Bytes: Adam moments (this rank's shard with the distributed optimizer).
  int64_t in_flight = 0;  // Micro-batches in flight at the peak, in chunk units (see above).
  int64_t activation_sets = 0;  // Kept: the sum of the chunks' peaks (see above).
  int64_t layers = 0;           // Transformer layers on this stage (all chunks).
  double activations = 0;       // Of the activation sets.
  double held = 0;  // This stack's transformer layers and residual streams, all sets (above).
  double total() const { return weights + gradients + optimizer + activations; }
};

struct MemoryEstimate {
  double layer_activations = 0;  // One layer, one micro-batch (the formula above).
  double layer_held = 0;         // The same as this stack holds (StackLayerActivationBytes).
  std::vector<StageMemory> stages;
};

// Bytes of the key/value cache of generation per token (position of one sequence) and TP rank:
// keys and values of every layer, g / t key/value heads of d each (g = num_attention_heads
// without grouped-query attention), in `dtype`: 2 L g d e / t. nn/attention.h's cache keeps as
// much again as gather scratch.
double KvCacheBytesPerToken(const ModelConfig& config, DType dtype, int tp);

// Activation bytes of one transformer layer and one micro-batch (the formula above).
double LayerActivationBytes(const ModelConfig& config, const MemoryOptions& options);

// Activation bytes this stack's transformer layer holds for one micro-batch (the formula above;
// its residual-stream tensors aside).
double StackLayerActivationBytes(const ModelConfig& config, const MemoryOptions& options);

// InvalidArgument for options the drivers refuse (a TP degree that does not divide the heads, a
// pipeline split that does not divide the layers, sequence parallelism without TP > 1 or with a
// sequence length TP does not divide, ...); Unimplemented for an architecture without stages at
// PP > 1; NotFound for an unregistered architecture.
absl::StatusOr<MemoryEstimate> EstimateMemory(const ModelConfig& config,
                                              const MemoryOptions& options);

}  // namespace models
}  // namespace mt

#endif  // MT_MODELS_MEMORY_H_
