// The GPT pretraining job (Megatron-LM's pretrain_gpt) as a library function, shared by the
// pretrain_gpt binary and the quickstart: the shared job (pretrain.h) with any registered
// GPT-family architecture trained on contiguous token samples of an indexed dataset, and optionally
// a sample generated at the end.
#ifndef MT_JOBS_PRETRAIN_PRETRAIN_GPT_H_
#define MT_JOBS_PRETRAIN_PRETRAIN_GPT_H_

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "jobs/pretrain/pretrain.h"

namespace mt {
namespace jobs {

struct PretrainGptConfig : PretrainConfig {
  // After training, rank 0 prints `generate_tokens` tokens sampled from this prompt (needs the
  // GPT-2 tokenizer assets); empty: no sample.
  std::string generate_prompt;
  int generate_tokens = 48;
  // Tokenizer files; only the installed GPT-2 assets are supported (empty).
  std::string vocab_file, merge_file;

  PretrainGptConfig() { model = models::ModelConfig::ForFamily(models::Family::kGpt2); }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    PretrainConfig::Fields(self, v);
    v("generate", &self.generate_prompt, "After training, print a sample continuing this prompt.");
    v("generate_tokens", &self.generate_tokens, "Tokens of the sample.");
    v("vocab_file", &self.vocab_file,
      "GPT-2 encoder.json (generation only; default: installed assets).");
    v("merge_file", &self.merge_file,
      "GPT-2 vocab.bpe (generation only; default: installed assets).");
  }
  absl::Status Validate(int world_size) const override;
  std::string DebugString() const override { return FieldsToText(*this); }
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& config,
                                              const LocalRanks& local, comm::Communicator& world,
                                              const std::atomic<bool>* stop,
                                              const JobHooks& hooks = {});

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_PRETRAIN_GPT_H_
