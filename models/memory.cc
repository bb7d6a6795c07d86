#include "models/memory.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "comm/parallel_context.h"
#include "core/status.h"
#include "models/registry.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace {

int64_t SeqLength(const ModelConfig& config, const MemoryOptions& o) {
  return o.seq_length > 0 ? o.seq_length : config.max_position_embeddings;
}

absl::Status CheckOptions(const ModelConfig& config, const MemoryOptions& o) {
  const int64_t s = SeqLength(config, o);
  if (o.data_parallel < 1 || o.micro_batch < 1 || o.micro_batches < 0 || s < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory: need a data-parallel size >= 1 (got ", o.data_parallel,
        "), --micro_batch_size >= 1 (got ", o.micro_batch, "), a sequence length >= 1 (got ", s,
        ") and micro-batches per iteration >= 0 (got ", o.micro_batches, ")"));
  }
  if (s > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("memory: --seq_length ", s,
                                                   " exceeds max_position_embeddings ",
                                                   config.max_position_embeddings));
  }
  if (o.sequence_parallel && (o.tensor_parallel < 2 || s % o.tensor_parallel != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory: --sequence_parallel needs --tensor_model_parallel_size > 1 (got ",
                     o.tensor_parallel, ") dividing the sequence length ", s));
  }
  return absl::OkStatus();
}

}  // namespace

double LayerActivationBytes(const ModelConfig& config, const MemoryOptions& o) {
  const double e = static_cast<double>(DTypeSize(o.compute_dtype));
  const double s = static_cast<double>(SeqLength(config, o));
  const double b = static_cast<double>(o.micro_batch);
  const double h = static_cast<double>(config.hidden_size);
  const double f = static_cast<double>(config.ffn());
  const double a = config.num_attention_heads;
  const double t = o.tensor_parallel;
  const double sbh = s * b * h;
  if (o.recompute == nn::Recompute::kYes) {
    return e * sbh / (o.sequence_parallel ? t : 1.0);
  }
  const double whole = (4 * e + 2) * sbh / (o.sequence_parallel ? t : 1.0);
  const double split = (4 * e + 2 * e * f / h) * sbh / t;
  const double scores =
      o.recompute == nn::Recompute::kSelective ? 0.0 : (2 * e + 1) * a * s * s * b / t;
  return whole + split + scores;
}

absl::StatusOr<int64_t> InFlightMicroBatches(int stages, int stage, int chunks,
                                             int64_t micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages || chunks < 1 || micro_batches < 0 ||
      (chunks > 1 && (stages < 2 || micro_batches % stages != 0))) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline schedule: stage ", stage, " of ", stages, " with ", chunks,
                     " chunks over ", micro_batches,
                     " micro-batches (interleaving needs >= 2 stages and a number of "
                     "micro-batches that they divide)"));
  }
  const int64_t warmup = static_cast<int64_t>(stages - stage - 1) * (chunks > 1 ? 2 : 1) +
                         static_cast<int64_t>(chunks - 1) * stages;
  if (micro_batches == 0) return warmup + 1;  // As many as the schedule can use.
  const int64_t total = micro_batches * chunks;
  if (chunks > 1 && micro_batches == stages) return total;  // All forwards first.
  return std::min(warmup + 1, total);
}

absl::StatusOr<MemoryEstimate> EstimateMemory(const ModelConfig& config, const MemoryOptions& o) {
  RETURN_IF_ERROR(config.ValidateParallel(o.tensor_parallel));
  RETURN_IF_ERROR(CheckOptions(config, o));
  ASSIGN_OR_RETURN(
      const comm::PipelineSplit split,
      comm::MakePipelineSplit(config.num_layers, o.pipeline_parallel, o.layers_per_virtual_stage));
  const double e = static_cast<double>(DTypeSize(o.compute_dtype));
  const double master = 4, grad = 4, moments = 8;
  const double copy = o.compute_dtype == DType::kF32 ? 0.0 : e;
  const double s = static_cast<double>(SeqLength(config, o));
  const double sbh = s * o.micro_batch * config.hidden_size;
  const double t = o.tensor_parallel, sp = o.sequence_parallel ? t : 1.0;

  MemoryEstimate est;
  est.layer_activations = LayerActivationBytes(config, o);
  for (int stage = 0; stage < split.stages; ++stage) {
    nn::ParameterStore store(/*tp_rank=*/0, o.tensor_parallel, o.compute_dtype);
    std::vector<std::unique_ptr<Model>> chunks;
    for (int v = 0; v < split.virtual_stages; ++v) {
      ModelOptions mo;
      if (split.stages > 1) {
        mo.stage.first_layer = split.FirstLayer(stage, v);
        mo.stage.num_layers = split.layers_per_chunk();
        mo.stage.holds_input = split.HoldsInput(stage, v);
        mo.stage.holds_output = split.HoldsOutput(stage, v);
      }
      ASSIGN_OR_RETURN(std::unique_ptr<Model> m, CreateModel(config, &store, mo));
      chunks.push_back(std::move(m));
    }
    StageMemory m;
    m.parameters = store.NumLocalElements();
    const double n = static_cast<double>(m.parameters);
    m.weights = n * (master + copy);
    m.gradients = n * grad;
    m.optimizer = n * moments / (o.distributed_optimizer ? o.data_parallel : 1);
    ASSIGN_OR_RETURN(m.in_flight, InFlightMicroBatches(split.stages, stage, split.virtual_stages,
                                                       o.micro_batches));
    const int64_t per_chunk = split.layers_per_chunk();
    m.layers = per_chunk * split.virtual_stages;
    // Megatron: every in-flight (micro-batch, chunk) keeps its layers' activations.
    m.activations_megatron = static_cast<double>(m.in_flight * per_chunk) * est.layer_activations;
    // This stack: each chunk one micro-batch's activations, the other in-flight ones their input
    // (with sequence parallelism, this TP rank's slice of it).
    const int64_t kept = std::min<int64_t>(m.in_flight, split.virtual_stages);
    m.activations = static_cast<double>(kept * per_chunk) * est.layer_activations +
                    static_cast<double>(m.in_flight - kept) * e * sbh / sp;
    // Input and output layers (the paper's section 4.3).
    const int64_t micro_in_flight =
        o.micro_batches > 0 ? std::min<int64_t>(split.stages, o.micro_batches) : split.stages;
    if (stage == 0) {
      const double embedding_mask = sbh / sp;
      m.activations_megatron += static_cast<double>(micro_in_flight) * embedding_mask;
      m.activations += embedding_mask;
    }
    if (stage == split.stages - 1) {
      const double output =
          2 * e * sbh / sp + 4.0 * s * o.micro_batch * config.PaddedVocab(o.tensor_parallel) / t;
      m.activations_megatron += output;
      m.activations += output;
    }
    est.stages.push_back(m);
  }
  return est;
}

}  // namespace models
}  // namespace mt
