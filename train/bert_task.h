// The BERT part of the training loop (train/trainer.h): masked-LM plus sentence-order losses
// ("lm loss", "sop loss"; the optimized total is their sum) on the BERT loader's micro-batches,
// with FLOPs counted by BertModelFlops (the MLM head runs at the masked positions only).
#ifndef MT_TRAIN_BERT_TASK_H_
#define MT_TRAIN_BERT_TASK_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "data/loader/bert_loader.h"
#include "models/bert/bert.h"
#include "train/trainer.h"

namespace mt {
namespace train {

class BertTask : public TrainingTask {
 public:
  // A fresh loader over this DP rank's validation micro-batches, from the first one.
  using LoaderFactory = std::function<absl::StatusOr<std::unique_ptr<data::BertLoader>>()>;

  // The model has pretraining heads. `train` yields this DP rank's training micro-batches;
  // `make_valid` may be empty. `recompute`: whether the model recomputes activations.
  BertTask(models::BertModel* model, bool recompute, data::BertLoader* train,
           LoaderFactory make_valid)
      : model_(model), recompute_(recompute), train_(train), make_valid_(std::move(make_valid)) {}

  std::vector<std::string> loss_names() const override { return {"lm loss", "sop loss"}; }
  int64_t accumulation_steps() const override { return train_->accumulation_steps(); }
  absl::StatusOr<std::optional<MicroBatchResult>> TrainMicroBatch(const nn::StepContext& sc,
                                                                  float loss_scale) override;
  absl::Status StartValidation() override;
  absl::StatusOr<std::optional<Losses>> ValidMicroBatch(const nn::StepContext& sc) override;

 private:
  models::BertModel* model_;
  bool recompute_;
  data::BertLoader* train_;
  LoaderFactory make_valid_;
  std::unique_ptr<data::BertLoader> valid_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_BERT_TASK_H_
