// The BERT pretraining job (Megatron-LM's pretrain_bert) as a library function: the shared job
// (pretrain.h) with BERT samples (sentence pairs, sentence-order prediction, whole-word masking)
// over a sentence-level indexed dataset and the model with MLM + SOP heads.
#ifndef MT_EXPERIMENTS_PRETRAIN_PRETRAIN_BERT_H_
#define MT_EXPERIMENTS_PRETRAIN_PRETRAIN_BERT_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "core/dtype.h"
#include "models/config.h"
#include "experiments/pretrain/pretrain.h"

namespace mt {
namespace experiments {

struct PretrainBertConfig : PretrainConfig {
  // model: family kBert, num_token_types >= 1; data_path: a sentence-level indexed dataset
  // (//data:preprocess --split_sentences).
  double mask_prob = 0.15;       // Fraction of tokens masked for the MLM loss.
  double short_seq_prob = 0.1;   // Probability of a shorter random target length.
  std::string vocab_file;        // WordPiece vocab.txt; empty: the installed bert-base-uncased.

  absl::Status Validate(int world_size) const override;
  std::string DebugString() const override;
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainResult> RunPretrainBert(const PretrainBertConfig& config,
                                               comm::Communicator& world,
                                               const std::atomic<bool>* stop);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_PRETRAIN_PRETRAIN_BERT_H_
