#include "models/memory.h"

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "comm/parallel_context.h"
#include "comm/pipeline_order.h"
#include "core/status.h"
#include "models/registry.h"
#include "nn/parameter.h"

namespace mt {
namespace models {
namespace {

int64_t SeqLength(const ModelConfig& config, const MemoryOptions& o) {
  return o.seq_length > 0 ? o.seq_length : config.max_position_embeddings;
}

// The positions of a sequence one rank holds: s / C with context parallelism.
double LocalSeq(const ModelConfig& config, const MemoryOptions& o) {
  return static_cast<double>(SeqLength(config, o)) / std::max(1, o.context_parallel);
}

absl::Status CheckOptions(const ModelConfig& config, const MemoryOptions& o) {
  const int64_t s = SeqLength(config, o);
  if (o.data_parallel < 1 || o.micro_batch < 1 || o.micro_batches < 0 || s < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory: need a data-parallel size >= 1 (got ", o.data_parallel,
        "), --micro_batch_size >= 1 (got ", o.micro_batch, "), a sequence length >= 1 (got ", s,
        ") and micro-batches per iteration >= 0 (got ", o.micro_batches, ")"));
  }
  if (o.context_parallel < 1 || (o.context_parallel > 1 && s % (2 * o.context_parallel) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat("memory: --context_parallel_size ",
                                                   o.context_parallel,
                                                   " must be >= 1 and split the sequence of ", s,
                                                   " into 2 x ", o.context_parallel, " chunks"));
  }
  if (s > config.max_position_embeddings) {
    return absl::InvalidArgumentError(absl::StrCat("memory: --seq_length ", s,
                                                   " exceeds max_position_embeddings ",
                                                   config.max_position_embeddings));
  }
  const int ep = o.expert_parallel;
  if (ep < 1 || o.data_parallel % ep != 0 ||
      (ep > 1 && (config.num_experts < 1 || config.num_experts % ep != 0))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory: --expert_model_parallel_size ", ep, " must be >= 1 and divide the data-parallel ",
        "size ", o.data_parallel, " and the experts (", config.num_experts, ")"));
  }
  if (ep > 1 && o.distributed_optimizer) {
    return absl::InvalidArgumentError(
        "memory: --use_distributed_optimizer is not supported with --expert_model_parallel_size "
        "> 1");
  }
  if (o.sequence_parallel && (o.tensor_parallel < 2 || s % o.tensor_parallel != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory: --sequence_parallel needs --tensor_model_parallel_size > 1 (got ",
                     o.tensor_parallel, ") dividing the sequence length ", s));
  }
  return absl::OkStatus();
}

// g d: the width of the keys (and of the values) of a position, all key/value heads.
double KvWidth(const ModelConfig& config) {
  return static_cast<double>(config.hidden_size) / config.num_attention_heads *
         config.query_groups();
}

}  // namespace

double KvCacheBytesPerToken(const ModelConfig& config, DType dtype, int tp) {
  return 2.0 * config.num_layers * KvWidth(config) * static_cast<double>(DTypeSize(dtype)) / tp;
}

double LayerActivationBytes(const ModelConfig& config, const MemoryOptions& o) {
  const double e = static_cast<double>(DTypeSize(o.compute_dtype));
  // With context parallelism a rank holds s / C positions; its queries see all s keys.
  const double s = LocalSeq(config, o), keys = static_cast<double>(SeqLength(config, o));
  const double b = static_cast<double>(o.micro_batch);
  const double h = static_cast<double>(config.hidden_size);
  const double f = static_cast<double>(config.ffn());
  const double a = config.num_attention_heads;
  const double kv = KvWidth(config);
  const double t = o.tensor_parallel;
  const double sbh = s * b * h;
  if (o.recompute == nn::Recompute::kYes) {
    return e * sbh / (o.sequence_parallel ? t : 1.0);
  }
  const double whole = (4 * e + 2) * sbh / (o.sequence_parallel ? t : 1.0);
  const double split = (2 * e + 2 * e * kv / h + 2 * e * f / h) * sbh / t;
  const double scores =
      o.recompute == nn::Recompute::kSelective ? 0.0 : (2 * e + 1) * a * s * keys * b / t;
  return whole + split + scores;
}

double StackLayerActivationBytes(const ModelConfig& config, const MemoryOptions& o) {
  if (o.recompute == nn::Recompute::kYes) return 0;
  const double e = static_cast<double>(DTypeSize(o.compute_dtype));
  const double rows = LocalSeq(config, o) * o.micro_batch;
  const double h = static_cast<double>(config.hidden_size);
  const double f = static_cast<double>(config.ffn());
  const double a = config.num_attention_heads;
  const double kv = KvWidth(config);
  const double t = o.tensor_parallel, sp = o.sequence_parallel ? t : 1.0;
  const double whole = (4 * e * h + 16) * rows / sp;
  const double split = e * (2 * h + 2 * kv + 2 * f) * rows / t;
  const double core =
      o.recompute == nn::Recompute::kSelective ? 0.0 : (e * (2 * h + 2 * kv) + 4 * a) * rows / t;
  return whole + split + core;
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
  const double s = LocalSeq(config, o);
  const double sbh = s * o.micro_batch * config.hidden_size;
  const double t = o.tensor_parallel, sp = o.sequence_parallel ? t : 1.0;

  MemoryEstimate est;
  est.layer_activations = LayerActivationBytes(config, o);
  est.layer_held = StackLayerActivationBytes(config, o);
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
    if (o.expert_parallel > 1) {  // Each EP rank holds 1 / EP of the experts.
      for (int i = 0; i < store.size(); ++i) {
        if (store.spec(i).name.find(".experts.") == std::string::npos) continue;
        const int64_t k = NumElements(store.local_shape(i));
        m.parameters -= k - k / o.expert_parallel;
      }
    }
    const double n = static_cast<double>(m.parameters);
    // The distributed optimizer shards the f32 masters too when the modules compute with copies.
    const bool masters_sharded = o.distributed_optimizer && copy > 0;
    m.weights = n * (master / (masters_sharded ? o.data_parallel : 1) + copy);
    m.gradients = n * grad;
    m.optimizer = n * moments / (o.distributed_optimizer ? o.data_parallel : 1);
    ASSIGN_OR_RETURN(const comm::PipelineInFlight in_flight,
                     comm::PipelineInFlightMicroBatches(split.stages, stage, split.virtual_stages,
                                                        static_cast<int>(o.micro_batches)));
    m.in_flight = in_flight.peak;
    m.activation_sets = in_flight.chunk_peak_sum();
    const int64_t per_chunk = split.layers_per_chunk();
    m.layers = per_chunk * split.virtual_stages;
    // Each activation set: its chunk's layers.
    m.activations = static_cast<double>(m.activation_sets * per_chunk) * est.layer_activations;
    m.held = static_cast<double>(m.activation_sets) *
             (static_cast<double>(per_chunk) * est.layer_held +
              static_cast<double>(per_chunk + 1) * e * sbh / sp);
    // Input and output layers (the paper's section 4.3), in the sets of the first and last chunk.
    if (stage == 0) {  // The embedding's dropout mask.
      m.activations += static_cast<double>(in_flight.chunk_peaks.front()) * sbh / sp;
    }
    if (stage == split.stages - 1) {
      const double output =
          2 * e * sbh / sp + 4.0 * s * o.micro_batch * config.PaddedVocab(o.tensor_parallel) / t;
      m.activations += static_cast<double>(in_flight.chunk_peaks.back()) * output;
    }
    est.stages.push_back(m);
  }
  return est;
}

}  // namespace models
}  // namespace mt
