// The BERT pretraining job (Megatron-LM's pretrain_bert) as a library function: the shared job
// (pretrain.h) with BERT samples (sentence pairs, sentence-order prediction, whole-word masking)
// over a sentence-level indexed dataset, for any registered BERT-family architecture with its
// MLM + SOP heads.
#ifndef MT_JOBS_PRETRAIN_PRETRAIN_BERT_H_
#define MT_JOBS_PRETRAIN_PRETRAIN_BERT_H_

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "jobs/pretrain/pretrain.h"

namespace mt {
namespace jobs {

struct PretrainBertConfig : PretrainConfig {
  // model: family kBert, num_token_types >= 1; data_path: a sentence-level indexed dataset
  // (//data:preprocess --split_sentences).
  double mask_prob = 0.15;      // Fraction of tokens masked for the MLM loss.
  double short_seq_prob = 0.1;  // Probability of a shorter random target length.
  std::string vocab_file;       // WordPiece vocab.txt; empty: the installed bert-base-uncased.

  PretrainBertConfig() { model = models::ModelConfig::ForFamily(models::Family::kBert); }

  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    PretrainConfig::Fields(self, v);
    v("mask_prob", &self.mask_prob, "Fraction of tokens masked for the MLM loss.");
    v("short_seq_prob", &self.short_seq_prob, "Probability of a shorter random sample length.");
    v("vocab_file", &self.vocab_file,
      "WordPiece vocab.txt (default: the installed bert-base-uncased).");
  }
  absl::Status Validate(int world_size) const override;
  std::string DebugString() const override { return FieldsToText(*this); }
};

// Collective over `world`. `stop` (may be null) requests a checkpoint and a clean exit (SIGTERM).
absl::StatusOr<PretrainResult> RunPretrainBert(const PretrainBertConfig& config,
                                               const LocalRanks& local, comm::Communicator& world,
                                               const std::atomic<bool>* stop,
                                               const JobHooks& hooks = {});

}  // namespace jobs
}  // namespace mt

#endif  // MT_JOBS_PRETRAIN_PRETRAIN_BERT_H_
