#include "jobs/pretrain/pretrain_bert.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "core/status.h"
#include "data/bert_dataset/bert_dataset.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/loader/bert_loader.h"
#include "data/tokenizers/wordpiece.h"
#include "train/batches.h"

namespace mt {
namespace jobs {

absl::Status PretrainBertConfig::Validate(int world_size) const {
  if (model.family != models::Family::kBert || model.num_token_types < 1) {
    return absl::InvalidArgumentError(
        "model config is not a BERT config (family bert, "
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

namespace {

absl::StatusOr<data::BertVocab> LoadVocab(const PretrainBertConfig& c) {
  std::unique_ptr<data::WordPiece> wp;
  if (c.vocab_file.empty()) {
    ASSIGN_OR_RETURN(wp, data::WordPiece::LoadDefault());
  } else {
    ASSIGN_OR_RETURN(wp, data::WordPiece::Load(c.vocab_file));
  }
  ASSIGN_OR_RETURN(data::BertVocab vocab, data::BertVocab::FromWordPiece(*wp));
  if (vocab.vocab_size != c.model.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("--vocab_size ", c.model.vocab_size,
                                                   " differs from the WordPiece vocabulary's ",
                                                   vocab.vocab_size, " tokens"));
  }
  return vocab;
}

// Sentence-pair samples with whole-word masking and sentence-order labels.
class BertData : public PretrainData {
 public:
  BertData(const PretrainBertConfig& c, data::BertVocab vocab) : c_(c), vocab_(std::move(vocab)) {}

  absl::StatusOr<std::unique_ptr<train::BatchStream>> Batches(const DataPlan& plan,
                                                              data::Split split) override {
    auto make =
        [&](std::shared_ptr<const data::IndexedDataset> indexed,
            int64_t num_samples) -> absl::StatusOr<std::shared_ptr<const data::BertSampleSource>> {
      auto dc = SharedDatasetConfig<data::BertDatasetConfig>(c_, num_samples);
      dc.short_seq_prob = c_.short_seq_prob;
      dc.masking.masked_lm_prob = c_.mask_prob;
      ASSIGN_OR_RETURN(auto ds, data::BertDataset::Create(std::move(indexed), split, dc, vocab_));
      return data::BertDatasetSource(std::shared_ptr<const data::BertDataset>(std::move(ds)));
    };
    ASSIGN_OR_RETURN(auto source,
                     PlannedSource<data::BertSampleSource>(plan, plan.samples(split), make));
    ASSIGN_OR_RETURN(auto loader, data::BertLoader::Create(std::move(source), plan.loader(split)));
    return train::BertBatches(std::move(loader));
  }

 private:
  const PretrainBertConfig& c_;
  const data::BertVocab vocab_;
};

}  // namespace

absl::StatusOr<PretrainResult> RunPretrainBert(const PretrainBertConfig& c, const LocalRanks& local,
                                               comm::Communicator& world,
                                               const std::atomic<bool>* stop,
                                               const JobHooks& hooks) {
  RETURN_IF_ERROR(c.Validate(world.size()));
  ASSIGN_OR_RETURN(data::BertVocab vocab, LoadVocab(c));
  BertData data(c, std::move(vocab));
  return RunPretraining(c, data, local, world, stop, hooks);
}

}  // namespace jobs
}  // namespace mt
