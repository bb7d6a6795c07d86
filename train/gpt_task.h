// The GPT part of the training loop (train/trainer.h): next-token cross-entropy ("lm loss") on the
// data loader's micro-batches, and Megatron's FLOP formula (train/flops.h).
#ifndef MT_TRAIN_GPT_TASK_H_
#define MT_TRAIN_GPT_TASK_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "data/loader/loader.h"
#include "models/gpt2/gpt2.h"
#include "train/trainer.h"

namespace mt {
namespace train {

class GptTask : public TrainingTask {
 public:
  // A fresh loader over this DP rank's validation micro-batches, from the first one.
  using LoaderFactory = std::function<absl::StatusOr<std::unique_ptr<data::Loader>>()>;

  // `train` yields this DP rank's training micro-batches; `make_valid` may be empty (no
  // validation data). `recompute`: whether the model recomputes activations (FLOP count).
  GptTask(models::GptModel* model, bool recompute, data::Loader* train, LoaderFactory make_valid)
      : model_(model), recompute_(recompute), train_(train), make_valid_(std::move(make_valid)) {}

  std::vector<std::string> loss_names() const override { return {"lm loss"}; }
  int64_t accumulation_steps() const override { return train_->accumulation_steps(); }
  absl::StatusOr<std::optional<MicroBatchResult>> TrainMicroBatch(const nn::StepContext& sc,
                                                                  float loss_scale) override;
  absl::Status StartValidation() override;
  absl::StatusOr<std::optional<Losses>> ValidMicroBatch(const nn::StepContext& sc) override;

 private:
  models::GptModel* model_;
  bool recompute_;
  data::Loader* train_;
  LoaderFactory make_valid_;
  std::unique_ptr<data::Loader> valid_;
};

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_GPT_TASK_H_
