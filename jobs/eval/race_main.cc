// RACE: fine-tune a pretrained BERT checkpoint and score RACE dev and test (Megatron-LM's
// multiple-choice protocol, jobs/eval/race_task.h), or score a fine-tuned one:
//
//   bazel-bin/jobs/eval/race --load=BERT_CKPT --data=RACE [--epochs=3] [--global_batch_size=32]
//       [--micro_batch_size=4] [--lr=2e-5] [--seq_length=512] [--save=FINETUNED]
//       [--results_json=FILE] [--per_example_jsonl=FILE] [--device=cuda] [--bf16]
//   bazel-bin/jobs/eval/race --eval_only --load=FINETUNED --data=RACE
//   mpirun -np 2 bazel-bin/jobs/eval/race ... (tensor parallelism over the ranks)
//
// The model and its config come from the checkpoint. The last stdout line is the results JSON.
#include <memory>

#include "core/config_flags.h"
#include "eval/harness_main.h"
#include "jobs/eval/race_task.h"

int main(int argc, char** argv) {
  using mt::jobs::RaceConfig;
  RaceConfig config;
  const mt::ConfigFlags<RaceConfig> flags(config);
  return mt::eval::HarnessMain(
      argc, argv,
      {"race",
       "RACE fine-tuning and accuracy of a BERT checkpoint:\n  race --load=BERT_CKPT "
       "--data=RACE_DIR [--epochs=3] [--save=DIR] ...\n  race --eval_only "
       "--load=FINETUNED --data=RACE_DIR"},
      &config.harness, [&] { return flags.ApplyGivenAndValidate(&config); },
      [&] { return std::make_unique<mt::jobs::RaceTask>(config); });
}
