#include "experiments/pretrain/pretrain_bert.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "comm/parallel_context.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "data/bert_dataset/bert_dataset.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/indexed/indexed_dataset.h"
#include "data/loader/bert_loader.h"
#include "data/tokenizers/wordpiece.h"
#include "models/bert/bert.h"
#include "nn/parameter.h"
#include "train/bert_task.h"

namespace mt {
namespace experiments {

absl::Status PretrainBertConfig::Validate(int world_size) const {
  if (model.family != models::Family::kBert || model.num_token_types < 1) {
    return absl::InvalidArgumentError("model config is not a BERT config (family bert, "
                                      "num_token_types >= 1)");
  }
  RETURN_IF_ERROR(PretrainConfig::Validate(world_size));
  if (trainer.seq_length < 5) {
    return absl::InvalidArgumentError(
        absl::StrCat("seq_length ", trainer.seq_length, " must be >= 5 for BERT samples"));
  }
  if (!(mask_prob > 0 && mask_prob <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("mask_prob ", mask_prob, " must be in (0, 1]"));
  }
  if (!(short_seq_prob >= 0 && short_seq_prob <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("short_seq_prob ", short_seq_prob, " must be in [0, 1]"));
  }
  return absl::OkStatus();
}

std::string PretrainBertConfig::DebugString() const {
  return absl::StrCat(PretrainConfig::DebugString(),
                      absl::StrFormat("vocab_file: %s\nmask_prob: %g\nshort_seq_prob: %g\n",
                                      vocab_file.empty() ? "(installed bert-base-uncased)"
                                                         : vocab_file,
                                      mask_prob, short_seq_prob));
}

namespace {

absl::StatusOr<std::unique_ptr<data::BertLoader>> MakeLoader(const PretrainBertConfig& c,
                                                             const data::BertVocab& vocab,
                                                             const DataPlan& plan,
                                                             data::Split split) {
  const bool train = split == data::Split::kTrain;
  data::BertDatasetConfig dc;
  dc.split = c.split;
  dc.seq_len = c.trainer.seq_length;
  dc.num_samples = train ? plan.train_samples : plan.valid_samples;
  dc.seed = c.trainer.seed;
  dc.short_seq_prob = c.short_seq_prob;
  dc.masking.masked_lm_prob = c.mask_prob;
  ASSIGN_OR_RETURN(auto ds, data::BertDataset::Create(plan.indexed, split, dc, vocab));
  return data::BertLoader::Create(std::shared_ptr<const data::BertDataset>(std::move(ds)),
                                  train ? plan.train : plan.valid);
}

absl::StatusOr<data::BertVocab> LoadVocab(const PretrainBertConfig& c) {
  std::unique_ptr<data::WordPiece> wp;
  if (c.vocab_file.empty()) {
    ASSIGN_OR_RETURN(wp, data::WordPiece::LoadDefault());
  } else {
    ASSIGN_OR_RETURN(wp, data::WordPiece::Load(c.vocab_file));
  }
  ASSIGN_OR_RETURN(data::BertVocab vocab, data::BertVocab::FromWordPiece(*wp));
  if (vocab.vocab_size != c.model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab_size ", c.model.vocab_size, " differs from the WordPiece vocabulary's ",
        vocab.vocab_size, " tokens"));
  }
  return vocab;
}

// The BERT model with MLM + SOP heads and its data (sentence-pair samples with whole-word masking).
class BertPretrainModel : public PretrainModel {
 public:
  BertPretrainModel(const PretrainBertConfig& c, data::BertVocab vocab)
      : c_(c), vocab_(std::move(vocab)) {}

  absl::Status CreateModel(nn::ParameterStore* store) override {
    ASSIGN_OR_RETURN(model_, models::BertModel::Create(c_.model, store,
                                                       models::BertHeads::kPretraining,
                                                       c_.trainer.recompute ? nn::Recompute::kYes
                                                                            : nn::Recompute::kNo));
    return absl::OkStatus();
  }

  absl::StatusOr<std::unique_ptr<train::TrainingTask>> CreateTask(
      const comm::ParallelContext& parallel, int64_t consumed_samples) override {
    ASSIGN_OR_RETURN(DataPlan plan, PlanData(c_, parallel, consumed_samples));
    ASSIGN_OR_RETURN(train_, MakeLoader(c_, vocab_, plan, data::Split::kTrain));
    return std::make_unique<train::BertTask>(
        model_.get(), c_.trainer.recompute, train_.get(),
        [this, plan]() { return MakeLoader(c_, vocab_, plan, data::Split::kValid); });
  }

 private:
  const PretrainBertConfig& c_;
  data::BertVocab vocab_;
  std::unique_ptr<models::BertModel> model_;
  std::unique_ptr<data::BertLoader> train_;
};

}  // namespace

absl::StatusOr<PretrainResult> RunPretrainBert(const PretrainBertConfig& c,
                                               comm::Communicator& world,
                                               const std::atomic<bool>* stop) {
  RETURN_IF_ERROR(c.Validate(world.size()));
  ASSIGN_OR_RETURN(data::BertVocab vocab, LoadVocab(c));
  return RunPretraining(
      c,
      [&c, &vocab]() -> std::unique_ptr<PretrainModel> {
        return std::make_unique<BertPretrainModel>(c, std::move(vocab));
      },
      world, stop);
}

}  // namespace experiments
}  // namespace mt
