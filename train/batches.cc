#include "train/batches.h"

#include <optional>
#include <utility>

namespace mt {
namespace train {

namespace {

// A loader whose micro-batches convert to models::Batch; keeps the current one alive.
template <typename Loader, typename MicroBatch, models::Batch (*kView)(const MicroBatch&)>
class LoaderStream : public BatchStream {
 public:
  explicit LoaderStream(std::unique_ptr<Loader> loader) : loader_(std::move(loader)) {}
  int64_t accumulation_steps() const override { return loader_->accumulation_steps(); }
  std::optional<models::Batch> Next() override {
    current_ = loader_->Next();
    if (!current_) return std::nullopt;
    return kView(*current_);
  }

 private:
  std::unique_ptr<Loader> loader_;
  std::optional<MicroBatch> current_;
};

models::Batch LanguageModelView(const data::MicroBatch& mb) {
  models::Batch b;
  b.tokens = mb.inputs.view();
  b.labels = mb.labels.view();
  return b;
}

models::Batch BertView(const data::BertMicroBatch& mb) {
  models::Batch b;
  b.tokens = mb.tokens.view();
  b.labels = mb.mlm_labels.view();
  b.token_types = mb.token_types.view();
  b.padding_mask = mb.padding_mask.view();
  b.sop_labels = mb.sop_labels.view();
  return b;
}

}  // namespace

std::unique_ptr<BatchStream> LanguageModelBatches(std::unique_ptr<data::Loader> loader) {
  return std::make_unique<LoaderStream<data::Loader, data::MicroBatch, LanguageModelView>>(
      std::move(loader));
}

std::unique_ptr<BatchStream> BertBatches(std::unique_ptr<data::BertLoader> loader) {
  return std::make_unique<LoaderStream<data::BertLoader, data::BertMicroBatch, BertView>>(
      std::move(loader));
}

}  // namespace train
}  // namespace mt
