#include "jobs/pretrain/pretrain_gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>

#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/loader/loader.h"
#include "data/tokenizers/factory.h"
#include "serve/generate.h"
#include "serve/generate_text.h"
#include "train/batches.h"

namespace mt {
namespace jobs {

absl::Status PretrainGptConfig::Validate(int world_size) const {
  if (model.family != models::Family::kGpt2) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", model_name, " is not a GPT model (architecture ",
                     model.ArchitectureName(), "); pretrain_bert trains BERT models"));
  }
  if (!vocab_file.empty() || !merge_file.empty()) {
    return absl::UnimplementedError(
        "--vocab_file/--merge_file: only the installed GPT-2 assets are supported "
        "(set MT_ASSETS_DIR to point elsewhere)");
  }
  if (generate_tokens < 0) return absl::InvalidArgumentError("generate_tokens must be >= 0");
  return PretrainConfig::Validate(world_size);
}

namespace {

// Samples up to `n` tokens after `prompt` through the model's key/value cache (serve/generate.h)
// with temperature 0.8 / top-k 40, stopping at <|endoftext|>; identical on every rank (same
// gathered logits, same seed). A prompt too long for the model keeps its last tokens, and `n` is
// cut to what fits in max_position_embeddings.
absl::StatusOr<std::string> Generate(models::Model& model, const nn::StepContext& sc,
                                     const std::string& prompt, int n, uint64_t seed) {
  ASSIGN_OR_RETURN(auto tokenizer, data::CreateTokenizer("gpt2"));
  ASSIGN_OR_RETURN(auto prompts, serve::TokenizePrompts(*tokenizer, {prompt}));
  std::vector<int32_t>& ids = prompts[0];
  const int64_t max_t = model.config().max_position_embeddings;
  if (static_cast<int64_t>(ids.size()) >= max_t) ids.erase(ids.begin(), ids.end() - (max_t - 1));
  serve::GenerateConfig g;
  g.tokens_to_generate = std::min<int64_t>(n, max_t - static_cast<int64_t>(ids.size()));
  g.sampling.top_k = 40;
  g.sampling.temperature = 0.8;
  g.sampling.seed = seed;
  g.eod = tokenizer->eod_id();
  ASSIGN_OR_RETURN(std::vector<serve::Generation> out, serve::Generate(sc, model, prompts, g));
  return tokenizer->Decode(out[0].tokens);
}

// Contiguous token samples of the indexed dataset with next-token labels, and the sample.
class GptData : public PretrainData {
 public:
  explicit GptData(const PretrainGptConfig& c) : c_(c) {}

  absl::Status AfterTraining(const nn::StepContext& sc, models::Model& model, bool rank0) override {
    if (c_.generate_prompt.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string text,
                     Generate(model, sc, c_.generate_prompt, c_.generate_tokens, c_.trainer.seed));
    if (rank0) std::printf("--- sample ---\n%s\n--------------\n", text.c_str());
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<train::BatchStream>> Batches(const DataPlan& plan,
                                                              data::Split split) override {
    auto make =
        [&](std::shared_ptr<const data::IndexedDataset> indexed,
            int64_t num_samples) -> absl::StatusOr<std::shared_ptr<const data::TokenSampleSource>> {
      ASSIGN_OR_RETURN(auto ds, data::GptDataset::Create(
                                    std::move(indexed), split,
                                    SharedDatasetConfig<data::GptDatasetConfig>(c_, num_samples)));
      return data::GptSampleSource(std::shared_ptr<const data::GptDataset>(std::move(ds)));
    };
    ASSIGN_OR_RETURN(auto source,
                     PlannedSource<data::TokenSampleSource>(plan, plan.samples(split), make));
    ASSIGN_OR_RETURN(auto loader, data::Loader::Create(std::move(source), plan.loader(split)));
    return train::LanguageModelBatches(std::move(loader));
  }

 private:
  const PretrainGptConfig& c_;
};

}  // namespace

absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& c, const LocalRanks& local,
                                              comm::Communicator& world,
                                              const std::atomic<bool>* stop,
                                              const JobHooks& hooks) {
  GptData data(c);
  return RunPretraining(c, data, local, world, stop, hooks);
}

}  // namespace jobs
}  // namespace mt
