// LAMBADA zero-shot accuracy of a checkpoint (Megatron-LM's protocol, eval/lambada_task.h):
//
//   bazel-bin/jobs/eval/lambada --load=CKPT_DIR --data=lambada_test.jsonl [--strict=true]
//       [--micro_batch_size=4] [--results_json=FILE] [--per_example_jsonl=FILE]
//       [--device=cuda] [--bf16]
//   mpirun -np 2 bazel-bin/jobs/eval/lambada --load=... (tensor parallelism over the ranks)
//
// The model and its config come from the checkpoint. The last stdout line is the results JSON.
#include <memory>

#include "core/config_flags.h"
#include "eval/harness_main.h"
#include "eval/lambada_task.h"

int main(int argc, char** argv) {
  using mt::eval::LambadaConfig;
  LambadaConfig config;
  const mt::ConfigFlags<LambadaConfig> flags(config);
  return mt::eval::HarnessMain(
      argc, argv,
      {"lambada",
       "LAMBADA accuracy of a checkpoint:\n  lambada --load=CKPT_DIR --data=lambada_test.jsonl "
       "[--strict=true] ..."},
      &config.harness, [&] { return flags.ApplyGivenAndValidate(&config); },
      [&] { return std::make_unique<mt::eval::LambadaTask>(config); });
}
