// Prints a registered model's config, parameter counts and training FLOPs per sample, the memory
// per rank of a training job with a given layout (models/memory.h), and the registered models and
// architectures.
//
//   bazel run //models:describe -- --model=gpt2-1.2b [--tensor_model_parallel_size=N]
//       [--pipeline_model_parallel_size=N] [--data_parallel_size=N] [--seq_length=1024]
//       [--micro_batch_size=N] [--global_batch_size=N] [--num_layers_per_virtual_pipeline_stage=N]
//       [--bf16 | --fp16] [--use_distributed_optimizer] [--sequence_parallel]
//       [--recompute_granularity=none|full|selective]
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/config_flags.h"
#include "core/fields.h"
#include "core/precision.h"
#include "core/status.h"
#include "core/tool_main.h"
#include "gflags/gflags.h"
#include "models/count.h"
#include "models/memory.h"
#include "models/registry.h"
#include "nn/transformer.h"

// The layout's flags are MemoryOptions' fields (models/memory.h); these are describe's own.
DEFINE_string(model, "", "Registered model name (empty: list the registered models).");
DEFINE_int64(global_batch_size, 0,
             "Samples per iteration: micro-batches per DP rank = global / (micro x DP), which "
             "caps the micro-batches in flight (0: as many as the pipeline schedule can use).");

namespace {

// The layout: the fields given as flags, then the micro-batches and the compute dtype.
absl::StatusOr<mt::models::MemoryOptions> MemoryFlags(
    const mt::ConfigFlags<mt::models::MemoryOptions>& flags,
    const mt::ConfigFlags<mt::PrecisionFlags>& precision_flags) {
  mt::models::MemoryOptions o;
  RETURN_IF_ERROR(flags.ApplyGiven(&o));
  if (FLAGS_global_batch_size < 0 || o.micro_batch < 1 || o.data_parallel < 1 ||
      FLAGS_global_batch_size % (o.micro_batch * o.data_parallel) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global_batch_size=", FLAGS_global_batch_size,
                     " must be a multiple of --micro_batch_size x --data_parallel_size (",
                     o.micro_batch, " x ", o.data_parallel, ")"));
  }
  o.micro_batches = FLAGS_global_batch_size / (o.micro_batch * o.data_parallel);
  // As a CPU run resolves them (f32 unless one of the flags says otherwise).
  ASSIGN_OR_RETURN(const mt::PrecisionFlags precision,
                   precision_flags.WithGiven(mt::PrecisionFlags()));
  ASSIGN_OR_RETURN(o.compute_dtype, precision.Resolve(mt::DeviceType::kCpu));
  return o;
}

std::string GiB(double bytes) { return absl::StrFormat("%.3f", bytes / (1024.0 * 1024 * 1024)); }

absl::Status PrintMemory(const mt::models::ModelConfig& config,
                         const mt::models::MemoryOptions& o) {
  using namespace mt::models;  // NOLINT: a main of this package.
  ASSIGN_OR_RETURN(const MemoryEstimate est, EstimateMemory(config, o));
  std::printf(
      "memory per rank: TP %d x PP %d x DP %d%s, micro batch %lld x %lld tokens, %s compute, "
      "recompute %s%s%s%s\n",
      o.tensor_parallel, o.pipeline_parallel, o.data_parallel,
      o.expert_parallel > 1 ? absl::StrCat(" (EP ", o.expert_parallel, ")").c_str() : "",
      static_cast<long long>(o.micro_batch),
      static_cast<long long>(o.seq_length > 0 ? o.seq_length : config.max_position_embeddings),
      std::string(mt::DTypeName(o.compute_dtype)).c_str(),
      std::string(
          mt::EnumName(o.recompute, mt::EnumNames<mt::nn::Recompute>(mt::nn::kRecomputeNames)))
          .c_str(),
      o.sequence_parallel ? ", sequence parallel" : "",
      o.distributed_optimizer ? ", distributed optimizer" : "",
      o.layers_per_virtual_stage > 0
          ? absl::StrCat(", ", o.layers_per_virtual_stage, " layers per virtual stage").c_str()
          : "");
  std::printf("activations per layer and micro-batch: %.2f MiB (Korthikanti et al. 2022)\n",
              est.layer_activations / (1024.0 * 1024));
  std::printf("held per layer and micro-batch: %.2f MiB (this stack's layers)\n",
              est.layer_held / (1024.0 * 1024));
  std::printf("%-6s %12s %8s %8s %9s %6s %9s %5s %11s %8s %8s\n", "stage", "parameters", "layers",
              "weights", "gradients", "optim", "in_flight", "sets", "activations", "total", "held");
  for (size_t i = 0; i < est.stages.size(); ++i) {
    const StageMemory& m = est.stages[i];
    std::printf("%-6zu %12lld %8lld %8s %9s %6s %9lld %5lld %11s %8s %8s\n", i,
                static_cast<long long>(m.parameters), static_cast<long long>(m.layers),
                GiB(m.weights).c_str(), GiB(m.gradients).c_str(), GiB(m.optimizer).c_str(),
                static_cast<long long>(m.in_flight), static_cast<long long>(m.activation_sets),
                GiB(m.activations).c_str(), GiB(m.total()).c_str(), GiB(m.held).c_str());
  }
  std::printf(
      "(GiB per rank; in_flight: the most micro-batches in flight at once, in chunk units; sets: "
      "the activation sets kept, each chunk's own peak (more than in_flight when interleaved "
      "chunks peak at different times); activations: Korthikanti et al.'s count; total: weights + "
      "gradients + optim + activations; held: what this stack's transformer layers and residual "
      "streams keep in those sets, which a run measures: no s x s scores (fused attention), "
      "dropout masks recomputed from their keys)\n");
  return absl::OkStatus();
}

absl::Status Describe(const std::string& name, const mt::models::MemoryOptions& layout) {
  using namespace mt::models;  // NOLINT: a main of this package.
  const int tp = layout.tensor_parallel;
  ASSIGN_OR_RETURN(const RegisteredModel model, FindModel(name));
  ASSIGN_OR_RETURN(const ParameterCount count, CountParameters(model.config, tp));
  ASSIGN_OR_RETURN(const Architecture arch, FindArchitecture(model.config.ArchitectureName()));
  mt::nn::ParameterStore store(/*tp_rank=*/0, tp);
  ASSIGN_OR_RETURN(auto m, CreateModel(model.config, &store));
  const int64_t s =
      layout.seq_length > 0 ? layout.seq_length : model.config.max_position_embeddings;
  // Every position scored (a GPT's count; BERT's MLM head at every position).
  const double flops = m->TrainingFlops(1, s, s);
  std::printf("model: %s (%s)\n", model.name.c_str(), model.description.c_str());
  std::printf("architecture: %s (%s)\n", arch.name.c_str(), arch.description.c_str());
  std::printf("%s", model.config.DebugString().c_str());
  std::printf("tensor_model_parallel_size: %d\n", tp);
  std::printf("padded_vocab_size: %lld\n", static_cast<long long>(count.padded_vocab));
  std::printf("parameters: %lld\n", static_cast<long long>(count.total));
  std::printf("parameters per rank: %lld\n", static_cast<long long>(count.per_rank));
  std::printf("training FLOPs per sample of %lld tokens: %.4g\n", static_cast<long long>(s), flops);
  if (model.config.num_experts > 0) {
    std::printf("active parameters per token: %lld (of %lld: %d of %d experts per layer)\n",
                static_cast<long long>(count.active), static_cast<long long>(count.total),
                model.config.moe_router_topk, model.config.num_experts);
    std::printf("training FLOPs per token: %.4g\n", flops / static_cast<double>(s));
  }
  std::printf("key/value heads: %d of %d (head dim %lld)\n", model.config.query_groups(),
              model.config.num_attention_heads,
              static_cast<long long>(model.config.hidden_size / model.config.num_attention_heads));
  std::printf("KV cache per token and rank (generation, bf16): %.0f bytes\n",
              KvCacheBytesPerToken(model.config, mt::DType::kBF16, tp));
  return PrintMemory(model.config, layout);
}

}  // namespace

int main(int argc, char** argv) {
  const mt::ConfigFlags<mt::models::MemoryOptions> flags{mt::models::MemoryOptions()};
  const mt::ConfigFlags<mt::PrecisionFlags> precision_flags{mt::PrecisionFlags()};
  return mt::ToolMain(
      "describe", "Describes a registered model: config, parameter counts and FLOPs.", argc, argv,
      [&]() -> absl::Status {
        if (!FLAGS_model.empty()) {
          ASSIGN_OR_RETURN(const mt::models::MemoryOptions layout,
                           MemoryFlags(flags, precision_flags));
          RETURN_IF_ERROR(Describe(FLAGS_model, layout));
        }
        const std::string names = absl::StrJoin(
            mt::models::RegisteredModels(), " ",
            [](std::string* out, const mt::models::RegisteredModel& m) { out->append(m.name); });
        const std::string arch_names = absl::StrJoin(
            mt::models::RegisteredArchitectures(), " ",
            [](std::string* out, const mt::models::Architecture& a) { out->append(a.name); });
        std::printf("registered models: %s\n", names.c_str());
        std::printf("registered architectures: %s\n", arch_names.c_str());
        return absl::OkStatus();
      });
}
