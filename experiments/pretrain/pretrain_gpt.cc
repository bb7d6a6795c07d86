#include "experiments/pretrain/pretrain_gpt.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>

#include "core/status.h"
#include "data/gpt_dataset/gpt_dataset.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/loader.h"
#include "data/tokenizers/factory.h"
#include "models/gpt2/gpt2.h"
#include "train/gpt_task.h"

namespace mt {
namespace experiments {

namespace {

absl::StatusOr<std::unique_ptr<data::Loader>> MakeLoader(const PretrainConfig& c,
                                                         const DataPlan& plan, data::Split split) {
  const bool train = split == data::Split::kTrain;
  data::GptDatasetConfig dc;
  dc.split = c.split;
  dc.seq_len = c.trainer.seq_length;
  dc.num_samples = train ? plan.train_samples : plan.valid_samples;
  dc.seed = c.trainer.seed;
  ASSIGN_OR_RETURN(auto ds, data::GptDataset::Create(plan.indexed, split, dc));
  return data::Loader::Create(
      data::GptSampleSource(std::shared_ptr<const data::GptDataset>(std::move(ds))),
      train ? plan.train : plan.valid);
}

// Samples `n` tokens after `prompt` with temperature 0.8 / top-k 40; identical on every rank (same
// gathered logits, same seed).
absl::StatusOr<std::string> Generate(models::GptModel& model, const nn::StepContext& base,
                                     const std::string& prompt, int n, uint64_t seed) {
  ASSIGN_OR_RETURN(auto tokenizer, data::CreateTokenizer("gpt2"));
  std::vector<int32_t> ids;
  tokenizer->EncodeAppend(prompt, &ids);
  if (ids.empty()) ids.push_back(tokenizer->special_tokens().eod);
  std::mt19937_64 rng(seed);
  nn::StepContext sc = base;
  sc.mode = nn::Mode::kEval;
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


// The GPT model, its data (contiguous token samples, next-token labels) and the optional sample.
class GptPretrainModel : public PretrainModel {
 public:
  explicit GptPretrainModel(const PretrainGptConfig& c) : c_(c) {}

  absl::Status CreateModel(nn::ParameterStore* store) override {
    ASSIGN_OR_RETURN(model_, models::GptModel::Create(
                                 c_.model, store,
                                 c_.trainer.recompute ? nn::Recompute::kYes : nn::Recompute::kNo));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<train::TrainingTask>> CreateTask(
      const comm::ParallelContext& parallel, int64_t consumed_samples) override {
    ASSIGN_OR_RETURN(DataPlan plan, PlanData(c_, parallel, consumed_samples));
    ASSIGN_OR_RETURN(train_, MakeLoader(c_, plan, data::Split::kTrain));
    return std::make_unique<train::GptTask>(
        model_.get(), c_.trainer.recompute, train_.get(),
        [this, plan]() { return MakeLoader(c_, plan, data::Split::kValid); });
  }

  absl::Status AfterTraining(const nn::StepContext& sc, bool rank0) override {
    if (c_.generate_prompt.empty()) return absl::OkStatus();
    ASSIGN_OR_RETURN(std::string text, Generate(*model_, sc, c_.generate_prompt,
                                                c_.generate_tokens, c_.trainer.seed));
    if (rank0) std::printf("--- sample ---\n%s\n--------------\n", text.c_str());
    return absl::OkStatus();
  }

 private:
  const PretrainGptConfig& c_;
  std::unique_ptr<models::GptModel> model_;
  std::unique_ptr<data::Loader> train_;
};

}  // namespace

absl::StatusOr<PretrainResult> RunPretrainGpt(const PretrainGptConfig& c,
                                              comm::Communicator& world,
                                              const std::atomic<bool>* stop) {
  return RunPretraining(
      c, [&c]() -> std::unique_ptr<PretrainModel> { return std::make_unique<GptPretrainModel>(c); },
      world, stop);
}

}  // namespace experiments
}  // namespace mt
