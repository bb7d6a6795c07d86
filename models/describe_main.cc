// Prints a registered model's config and parameter counts, and the registered names.
//
//   bazel run //models:describe -- --model=gpt2-1.2b [--tensor_model_parallel_size=N]
#include <cstdio>
#include <string>

#include "absl/strings/str_join.h"
#include "gflags/gflags.h"
#include "models/count.h"
#include "models/registry.h"

DEFINE_string(model, "", "Registered model name (empty: list the registered models).");
DEFINE_int32(tensor_model_parallel_size, 1, "Tensor-parallel degree for the per-rank count.");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("Describes a registered model: config and parameter counts.");
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  const auto all = mt::models::RegisteredModels();
  const std::string names = absl::StrJoin(
      all, " ", [](std::string* out, const mt::models::RegisteredModel& m) { out->append(m.name); });
  if (FLAGS_model.empty()) {
    std::printf("registered models: %s\n", names.c_str());
    return 0;
  }
  auto model = mt::models::FindModel(FLAGS_model);
  if (!model.ok()) {
    std::fprintf(stderr, "describe: error: %s\n", std::string(model.status().message()).c_str());
    return 1;
  }
  const int tp = FLAGS_tensor_model_parallel_size;
  auto count = mt::models::CountParameters(model->config, tp);
  if (!count.ok()) {
    std::fprintf(stderr, "describe: error: %s\n", std::string(count.status().message()).c_str());
    return 1;
  }
  std::printf("model: %s (%s)\n", model->name.c_str(), model->description.c_str());
  std::printf("%s", model->config.DebugString().c_str());
  std::printf("tensor_model_parallel_size: %d\n", tp);
  std::printf("padded_vocab_size: %lld\n", static_cast<long long>(count->padded_vocab));
  std::printf("parameters: %lld\n", static_cast<long long>(count->total));
  std::printf("parameters per rank: %lld\n", static_cast<long long>(count->per_rank));
  std::printf("registered models: %s\n", names.c_str());
  return 0;
}
