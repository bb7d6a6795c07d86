// Prints a registered model's config, parameter counts and training FLOPs per sample, and the
// registered models and architectures.
//
//   bazel run //models:describe -- --model=gpt2-1.2b [--tensor_model_parallel_size=N]
//       [--seq_length=1024]
#include <cstdio>
#include <string>

#include "absl/strings/str_join.h"
#include "core/status.h"
#include "gflags/gflags.h"
#include "models/count.h"
#include "models/registry.h"

DEFINE_string(model, "", "Registered model name (empty: list the registered models).");
DEFINE_int32(tensor_model_parallel_size, 1, "Tensor-parallel degree for the per-rank count.");
DEFINE_int32(seq_length, 0, "Sequence length of the FLOPs line (0: max_position_embeddings).");

namespace {

absl::Status Describe(const std::string& name, int tp) {
  using namespace mt::models;  // NOLINT: a main of this package.
  ASSIGN_OR_RETURN(const RegisteredModel model, FindModel(name));
  ASSIGN_OR_RETURN(const ParameterCount count, CountParameters(model.config, tp));
  ASSIGN_OR_RETURN(const Architecture arch, FindArchitecture(model.config.ArchitectureName()));
  mt::nn::ParameterStore store(/*tp_rank=*/0, tp);
  ASSIGN_OR_RETURN(auto m, CreateModel(model.config, &store));
  const int64_t s = FLAGS_seq_length > 0 ? FLAGS_seq_length : model.config.max_position_embeddings;
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
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Describes a registered model: config, parameter counts and FLOPs.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const auto models = mt::models::RegisteredModels();
  const auto architectures = mt::models::RegisteredArchitectures();
  const std::string names = absl::StrJoin(
      models, " ",
      [](std::string* out, const mt::models::RegisteredModel& m) { out->append(m.name); });
  const std::string arch_names = absl::StrJoin(
      architectures, " ",
      [](std::string* out, const mt::models::Architecture& a) { out->append(a.name); });
  if (!FLAGS_model.empty()) {
    const absl::Status s = Describe(FLAGS_model, FLAGS_tensor_model_parallel_size);
    if (!s.ok()) {
      std::fprintf(stderr, "describe: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  std::printf("registered models: %s\n", names.c_str());
  std::printf("registered architectures: %s\n", arch_names.c_str());
  return 0;
}
