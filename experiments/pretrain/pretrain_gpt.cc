#include "experiments/pretrain/pretrain_gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>

#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/loader/loader.h"
#include "data/tokenizers/factory.h"
#include "train/batches.h"

namespace mt {
namespace experiments {

absl::Status PretrainGptConfig::Validate(int world_size) const {
  if (model.family != models::Family::kGpt2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=", model_name, " is not a GPT model (architecture ", model.ArchitectureName(),
        "); pretrain_bert trains BERT models"));
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

// Samples `n` tokens after `prompt` with temperature 0.8 / top-k 40; identical on every rank (same
// gathered logits, same seed).
absl::StatusOr<std::string> Generate(models::Model& model, const nn::StepContext& sc,
                                     const std::string& prompt, int n, uint64_t seed) {
  ASSIGN_OR_RETURN(auto tokenizer, data::CreateTokenizer("gpt2"));
  std::vector<int32_t> ids;
  tokenizer->EncodeAppend(prompt, &ids);
  if (ids.empty()) ids.push_back(tokenizer->special_tokens().eod);
  std::mt19937_64 rng(seed);
  const int64_t max_t = model.config().max_position_embeddings;
  const int64_t V = model.config().vocab_size;
  for (int i = 0; i < n; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), max_t);
    Tensor tokens = Tensor::Host({1, T}, DType::kI32);
    std::copy(ids.end() - T, ids.end(), tokens.data_as<int32_t>());
    Tensor logits = Tensor::Host({T, model.padded_vocab()}, DType::kF32);
    RETURN_IF_ERROR(model.Logits(sc, tokens.view(), logits.view()));
    const float* last = logits.data_as<float>() + (T - 1) * model.padded_vocab();
    std::vector<std::pair<float, int>> top;
    for (int64_t v = 0; v < V; ++v) top.push_back({last[v], static_cast<int>(v)});
    std::partial_sort(top.begin(), top.begin() + 40, top.end(), std::greater<>());
    top.resize(40);
    std::vector<double> p;
    for (auto& [l, v] : top) p.push_back(std::exp((l - top[0].first) / 0.8));
    std::discrete_distribution<int> pick(p.begin(), p.end());
    ids.push_back(top[pick(rng)].second);
  }
  return tokenizer->Decode(ids);
}

// Contiguous token samples of the indexed dataset with next-token labels, and the sample.
class GptData : public PretrainData {
 public:
  explicit GptData(const PretrainGptConfig& c) : c_(c) {}

  absl::StatusOr<std::unique_ptr<train::BatchStream>> Train(const DataPlan& plan) override {
    return Batches(plan, data::Split::kTrain);
  }
  absl::StatusOr<std::unique_ptr<train::BatchStream>> Valid(const DataPlan& plan) override {
    return Batches(plan, data::Split::kValid);
  }

  absl::Status AfterTraining(const nn::StepContext& sc, models::Model& model,
                             bool rank0) override {
    if (c_.generate_prompt.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string text, Generate(model, sc, c_.generate_prompt, c_.generate_tokens,
                                                c_.trainer.seed));
    if (rank0) std::printf("--- sample ---\n%s\n--------------\n", text.c_str());
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<std::unique_ptr<train::BatchStream>> Batches(const DataPlan& plan,
                                                              data::Split split) const {
    const bool train = split == data::Split::kTrain;
    data::GptDatasetConfig dc;
    dc.split = c_.split;
    dc.seq_len = c_.trainer.seq_length;
    dc.num_samples = train ? plan.train_samples : plan.valid_samples;
    dc.seed = c_.trainer.seed;
    ASSIGN_OR_RETURN(auto ds, data::GptDataset::Create(plan.indexed, split, dc));
    ASSIGN_OR_RETURN(
        auto loader,
        data::Loader::Create(
            data::GptSampleSource(std::shared_ptr<const data::GptDataset>(std::move(ds))),
            train ? plan.train : plan.valid));
    return train::LanguageModelBatches(std::move(loader));
  }

  const PretrainGptConfig& c_;
};

}  // namespace

absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& c, const LocalRanks& local,
                                              comm::Communicator& world,
                                              const std::atomic<bool>* stop) {
  GptData data(c);
  return RunPretraining(c, data, local, world, stop);
}

}  // namespace experiments
}  // namespace mt
