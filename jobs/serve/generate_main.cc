// Text generation from a trained GPT checkpoint (Megatron-LM's text generation, from the command
// line). One process per tensor-parallel rank, as many as the checkpoint has shards:
//
//   bazel-bin/jobs/serve/generate --load=CKPT --prompt="The meaning of life is"
//       --tokens_to_generate=32
//   mpirun -np 2 bazel-bin/jobs/serve/generate --load=CKPT_TP2 --prompts_file=prompts.txt
//       --top_p=0.9
//
// --prompts_file holds one prompt per line (an empty line: an unconditional sample, started from
// <|endoftext|>); prompts run in batches of --micro_batch_size. Sampling: --greedy (or --top_k=1)
// picks the argmax; otherwise --temperature, then --top_k or --top_p (not both); --seed makes the
// draws reproducible. A sample ends at <|endoftext|> or after --tokens_to_generate tokens. Rank 0
// prints each prompt followed by its continuation. Bad flags print one line and exit 1; any other
// failure ends every rank (MpiRuntime::Abort).
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "comm/mpi_main.h"
#include "core/config_flags.h"
#include "core/status.h"
#include "data/tokenizers/factory.h"
#include "eval/text_file.h"
#include "serve/generate.h"
#include "serve/generate_text.h"
#include "serve/inference.h"

namespace mt {
namespace jobs {

using serve::CompletionText;
using serve::Generate;
using serve::GenerateConfig;
using serve::Generation;
using serve::InferenceConfig;
using serve::InferenceSession;
using serve::LoadForInference;
using serve::SamplingConfig;
using serve::TokenizePrompts;
namespace {

struct GenerateMainConfig {
  InferenceConfig inference;
  std::string prompt, prompts_file;
  int64_t tokens_to_generate = 64;
  SamplingConfig sampling;
  int micro_batch_size = 8;

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    InferenceConfig::Fields(self.inference, v);
    v("prompt", &self.prompt, "The prompt (or --prompts_file).");
    v("prompts_file", &self.prompts_file, "A file of prompts, one per line (or --prompt).");
    v("tokens_to_generate", &self.tokens_to_generate, "Tokens to generate per prompt.");
    SamplingConfig::Fields(self.sampling, v);
    v("micro_batch_size", &self.micro_batch_size, "Prompts generated together.");
  }

  absl::Status Validate() const {
    if (prompt.empty() == prompts_file.empty()) {
      return absl::InvalidArgumentError("give one of --prompt and --prompts_file");
    }
    if (tokens_to_generate < 0) {
      return absl::InvalidArgumentError("--tokens_to_generate must be >= 0");
    }
    if (micro_batch_size < 1) return absl::InvalidArgumentError("--micro_batch_size must be >= 1");
    return sampling.Validate();
  }
};

absl::StatusOr<std::vector<std::string>> ReadPrompts(const GenerateMainConfig& c) {
  if (c.prompts_file.empty()) return std::vector<std::string>{c.prompt};
  ASSIGN_OR_RETURN(std::string text, eval::ReadTextFile(c.prompts_file));
  if (text.empty()) return absl::InvalidArgumentError(c.prompts_file + " holds no prompt");
  if (text.back() == '\n') text.pop_back();
  return std::vector<std::string>(absl::StrSplit(text, '\n'));
}

// Loads the checkpoint, generates every prompt's continuation, prints them on rank 0.
absl::Status Run(const GenerateMainConfig& c, comm::Communicator& world, int local_rank,
                 int local_size) {
  ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadPrompts(c));
  ASSIGN_OR_RETURN(std::unique_ptr<data::Tokenizer> tokenizer, data::CreateTokenizer("gpt2"));
  ASSIGN_OR_RETURN(std::unique_ptr<InferenceSession> s,
                   LoadForInference(c.inference, world, local_rank, local_size));
  if (s->model->config().vocab_size != tokenizer->vocab_size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("the checkpoint's vocabulary has ", s->model->config().vocab_size,
                     " tokens, the GPT-2 tokenizer ", tokenizer->vocab_size()));
  }
  GenerateConfig g;
  g.tokens_to_generate = c.tokens_to_generate;
  g.sampling = c.sampling;
  g.eod = tokenizer->eod_id();
  for (size_t first = 0; first < texts.size(); first += c.micro_batch_size) {
    const std::vector<std::string> batch(
        texts.begin() + first, texts.begin() + std::min(texts.size(), first + c.micro_batch_size));
    ASSIGN_OR_RETURN(auto prompts, TokenizePrompts(*tokenizer, batch));
    ASSIGN_OR_RETURN(std::vector<Generation> out, Generate(s->Step(), *s->model, prompts, g));
    for (size_t i = 0; i < out.size() && world.rank() == 0; ++i) {
      ASSIGN_OR_RETURN(std::string completion, CompletionText(*tokenizer, out[i]));
      std::printf("--- sample %zu (%lld tokens, %s) ---\n%s%s\n", first + i,
                  static_cast<long long>(out[i].generated()), FinishReasonName(out[i].finish),
                  batch[i].c_str(), completion.c_str());
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace jobs
}  // namespace mt

int main(int argc, char** argv) {
  mt::jobs::GenerateMainConfig config;
  const mt::ConfigFlags<mt::jobs::GenerateMainConfig> flags(config);
  return mt::comm::MpiMain(
      argc, argv,
      {"generate", "Text generation from a trained GPT checkpoint (Megatron-LM flags)."},
      [&](int) { return flags.ApplyGivenAndValidate(&config); },
      [&](const mt::comm::MpiProcess& p) -> absl::StatusOr<int> {
        RETURN_IF_ERROR(mt::jobs::Run(config, p.world, p.local_rank, p.local_size));
        return 0;
      });
}
