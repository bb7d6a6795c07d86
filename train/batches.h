// The data loaders as the trainer's BatchStream (trainer.h): each yields models::Batch views of
// the loader's micro-batch, valid until the next Next().
//
//   GPT family:  data::Loader micro-batches (inputs, next-token labels) -> tokens, labels.
//   BERT family: data::BertLoader micro-batches -> tokens, token_types, padding_mask, labels (the
//                MLM labels), sop_labels.
#ifndef MT_TRAIN_BATCHES_H_
#define MT_TRAIN_BATCHES_H_

#include <memory>

#include "data/loader/bert_loader.h"
#include "data/loader/loader.h"
#include "train/trainer.h"

namespace mt {
namespace train {

std::unique_ptr<BatchStream> LanguageModelBatches(std::unique_ptr<data::Loader> loader);
std::unique_ptr<BatchStream> BertBatches(std::unique_ptr<data::BertLoader> loader);

}  // namespace train
}  // namespace mt

#endif  // MT_TRAIN_BATCHES_H_
