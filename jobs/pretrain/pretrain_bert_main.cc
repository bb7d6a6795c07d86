// BERT pretraining driver (MLM + sentence-order prediction) with Megatron-LM's flag names. The
// data is a sentence-level BERT indexed dataset (//data:preprocess --tokenizer=bert
// --split_sentences). Launch one process per rank:
//
//   mpirun -np 2 bazel-bin/jobs/pretrain/pretrain_bert --tensor_model_parallel_size=2
//       --data_path=PREFIX --num_layers=4 --hidden_size=128 --num_attention_heads=4 ...
//
// (one process without mpirun is a world of one). --model=NAME trains any registered BERT-family
// architecture. SIGTERM saves a checkpoint (with --save) and exits cleanly; any error ends every
// rank with a one-line message and a non-zero exit.
#include "core/config_flags.h"
#include "jobs/pretrain/driver.h"
#include "jobs/pretrain/pretrain_bert.h"

int main(int argc, char** argv) {
  using namespace mt::jobs;  // NOLINT: a main of this package.
  PretrainBertConfig config;
  const mt::ConfigFlags<PretrainBertConfig> flags(config, kNotFlags);
  return PretrainMain(
      argc, argv,
      {"pretrain_bert", "BERT pretraining with tensor and data parallelism (Megatron-LM flags)."},
      &config, [&] { return flags.ApplyGiven(&config); },
      [&](const LocalRanks& local, mt::comm::Communicator& world, const std::atomic<bool>* stop) {
        return RunPretrainBert(config, local, world, stop);
      });
}
