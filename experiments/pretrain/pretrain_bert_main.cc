// BERT pretraining driver (MLM + sentence-order prediction) with Megatron-LM's flag names. The
// data is a sentence-level BERT indexed dataset (//data:preprocess --tokenizer=bert
// --split_sentences). Launch one process per rank:
//
//   mpirun -np 2 bazel-bin/experiments/pretrain/pretrain_bert --tensor_model_parallel_size=2
//       --data_path=PREFIX --num_layers=4 --hidden_size=128 --num_attention_heads=4 ...
//
// (one process without mpirun is a world of one). SIGTERM saves a checkpoint (with --save) and
// exits cleanly; any error ends every rank with a one-line message and a non-zero exit.
#include "experiments/pretrain/pretrain_bert.h"
#include "experiments/pretrain/pretrain_flags.h"
#include "gflags/gflags.h"

DEFINE_int32(vocab_size, 30522, "Vocabulary size (bert-base-uncased WordPiece: 30522).");
DEFINE_string(vocab_file, "", "WordPiece vocab.txt (default: the installed bert-base-uncased).");
DEFINE_double(mask_prob, 0.15, "Fraction of tokens masked for the MLM loss.");
DEFINE_double(short_seq_prob, 0.1, "Probability of a shorter random sample length.");
DEFINE_int32(num_token_types, 2, "Token types (segments).");


namespace {

absl::StatusOr<mt::experiments::PretrainBertConfig> ConfigFromFlags() {
  mt::experiments::PretrainBertConfig c;
  absl::Status s =
      mt::experiments::ApplyCommonFlags(mt::models::Family::kBert, FLAGS_vocab_size, &c);
  if (!s.ok()) return s;
  if (FLAGS_model.empty() ||
      !gflags::GetCommandLineFlagInfoOrDie("num_token_types").is_default) {
    c.model.num_token_types = FLAGS_num_token_types;
  }
  c.vocab_file = FLAGS_vocab_file;
  c.mask_prob = FLAGS_mask_prob;
  c.short_seq_prob = FLAGS_short_seq_prob;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return mt::experiments::PretrainMain<mt::experiments::PretrainBertConfig,
                                       mt::experiments::PretrainResult>(
      argc, argv, "pretrain_bert",
      "BERT pretraining with tensor and data parallelism (Megatron-LM flags).", ConfigFromFlags,
      mt::experiments::RunPretrainBert);
}
