// WikiText-103 zero-shot perplexity of a checkpoint (Megatron-LM's protocol,
// eval/wikitext103_task.h):
//
//   bazel-bin/jobs/eval/wikitext103 --load=CKPT_DIR --data=wiki.test.tokens [--seq_length=1024]
//       [--overlapping_eval=32] [--micro_batch_size=4] [--results_json=FILE]
//       [--per_example_jsonl=FILE] [--device=cuda] [--bf16]
//   mpirun -np 2 bazel-bin/jobs/eval/wikitext103 --load=... (tensor parallelism over the ranks)
//
// The model and its config come from the checkpoint. The last stdout line is the results JSON.
#include <memory>

#include "core/config_flags.h"
#include "eval/harness_main.h"
#include "eval/wikitext103_task.h"

int main(int argc, char** argv) {
  using mt::eval::WikiText103Config;
  WikiText103Config config;
  const mt::ConfigFlags<WikiText103Config> flags(config);
  return mt::eval::HarnessMain(
      argc, argv,
      {"wikitext103",
       "WikiText-103 perplexity of a checkpoint:\n  wikitext103 --load=CKPT_DIR "
       "--data=wiki.test.tokens [--seq_length=N] [--overlapping_eval=32] ..."},
      &config.harness, [&] { return flags.ApplyGivenAndValidate(&config); },
      [&] { return std::make_unique<mt::eval::WikiText103Task>(config); });
}
