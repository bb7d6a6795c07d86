// GPT pretraining driver with Megatron-LM's flag names. Launch one process per rank:
//
//   mpirun -np 2 bazel-bin/experiments/pretrain/pretrain_gpt --tensor_model_parallel_size=2
//       --data_path=PREFIX --num_layers=4 --hidden_size=128 --num_attention_heads=4 ...
//
// (one process without mpirun is a world of one). SIGTERM saves a checkpoint (with --save) and
// exits cleanly; any error ends every rank with a one-line message and a non-zero exit.
#include "experiments/pretrain/pretrain_gpt.h"
#include "experiments/pretrain/pretrain_flags.h"
#include "gflags/gflags.h"

DEFINE_int32(vocab_size, 50257, "Vocabulary size (GPT-2 BPE: 50257).");
DEFINE_string(vocab_file, "", "GPT-2 encoder.json (generation only; default: installed assets).");
DEFINE_string(merge_file, "", "GPT-2 vocab.bpe (generation only; default: installed assets).");
DEFINE_string(generate, "", "After training, print a sample continuing this prompt.");

namespace {

absl::StatusOr<mt::experiments::PretrainGptConfig> ConfigFromFlags() {
  mt::experiments::PretrainGptConfig c;
  absl::Status s =
      mt::experiments::ApplyCommonFlags(mt::models::Family::kGpt2, FLAGS_vocab_size, &c);
  if (!s.ok()) return s;
  if (!FLAGS_vocab_file.empty() || !FLAGS_merge_file.empty()) {
    return absl::UnimplementedError(
        "--vocab_file/--merge_file: only the installed GPT-2 assets are supported "
        "(set MT_ASSETS_DIR to point elsewhere)");
  }
  c.generate_prompt = FLAGS_generate;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  return mt::experiments::PretrainMain<mt::experiments::PretrainGptConfig,
                                       mt::experiments::PretrainResult>(
      argc, argv, "pretrain_gpt",
      "GPT pretraining with tensor and data parallelism (Megatron-LM flags).", ConfigFromFlags,
      mt::experiments::RunPretrainGpt);
}
