// The GPT pretraining job (Megatron-LM's pretrain_gpt) as a library function, shared by the
// pretrain_gpt binary and the quickstart: the shared job (pretrain.h) with a GPT-2 model trained on
// contiguous token samples of an indexed dataset, and optionally a generated sample at the end.
#ifndef MT_EXPERIMENTS_PRETRAIN_PRETRAIN_GPT_H_
#define MT_EXPERIMENTS_PRETRAIN_PRETRAIN_GPT_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "experiments/pretrain/pretrain.h"

namespace mt {
namespace experiments {

struct PretrainGptConfig : PretrainConfig {
  // After training, rank 0 prints `generate_tokens` tokens sampled from this prompt (needs the
  // GPT-2 tokenizer assets); empty: no sample.
  std::string generate_prompt;
  int generate_tokens = 48;
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& config,
                                              comm::Communicator& world,
                                              const std::atomic<bool>* stop);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_PRETRAIN_PRETRAIN_GPT_H_
