// Converting Hugging Face GPT-2, BERT, Llama, Mistral and Mixtral checkpoints (config.json +
// safetensors) to the project's checkpoints (checkpoint.h) and back;
// //checkpoint:convert_checkpoint is the command. Llama and Mistral become the modern decoder
// (kLlamaArchitecture), Mixtral the mixture of experts (kMixtralArchitecture), which the program
// must link (//models/variants/modern_decoder, //models/variants/moe; the command does): without
// it, import and export fail with the registry's unknown-architecture error.
//
// Import reads config.json (hf_config.h) and the weights (hf_files.h: f32, bf16 or f16; one file
// or an index and shards), builds the model config.json names with pretraining heads at TP 1,
// fills every parameter from its Hugging Face tensor(s) (hf_layout.h), and saves iteration 0 as a
// committed checkpoint with tp_size shards (the vocabulary padded for tp_size as every model
// here pads it; the padding rows zero, and masked out of every softmax by the models). The
// checkpoint holds parameters only, no optimizer state: its trainer state is
// {"converted_from": "huggingface", "hf_dtype": "BF16", ...} (HfConversionState), which the
// pretraining drivers recognise and load as --finetune does. The tokenizer files of the
// directory (vocab.json, merges.txt, vocab.txt, tokenizer.json, tokenizer_config.json,
// special_tokens_map.json) are copied into <save>/tokenizer/.
//
// Export loads a checkpoint's parameters (any TP degree, resharded in memory to TP 1) and writes
// config.json, model.safetensors (Hugging Face's canonical names, no prefix; the tied output
// layers and the causal-mask buffers left out, as save_pretrained leaves them) in the source
// dtype, and the tokenizer files. A modern decoder is written as Llama, or as Mistral when it was
// converted from one.
#ifndef MT_CHECKPOINT_HF_CHECKPOINT_H_
#define MT_CHECKPOINT_HF_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/hf_config.h"
#include "core/dtype.h"
#include "core/file_system.h"

namespace mt {
namespace checkpoint {

constexpr char kHfTokenizerDir[] = "tokenizer";

struct HfImportOptions {
  std::string input_dir;  // Hugging Face model directory.
  std::string save_dir;   // Checkpoint directory to write (must not hold iteration 0).
  int tp_size = 1;
  // Initial values (nn::ParameterStore::Allocate) of optional tensors the file lacks (BERT's
  // MLM and NSP heads in a bare BertModel checkpoint).
  uint64_t seed = 1234;
  FileSystem* fs = &DefaultFileSystem();  // What both directories are read and written through.
};

struct HfImportResult {
  HfConfig config;
  DType source_dtype = DType::kF32;
  int64_t padded_vocab = 0;                  // For tp_size.
  std::vector<std::string> initialized;      // Our parameters the file lacked (optional ones).
  std::vector<std::string> tokenizer_files;  // Copied into <save>/tokenizer/.
};

// Errors, each one line naming the file and the tensor or field: those of ParseHfConfig and
// HfWeights::Open; NotFound for a missing config.json or a missing tensor (naming it);
// InvalidArgument for a tensor of the wrong shape (naming it, its shape and the expected one),
// a tied output layer that differs from the embedding, or a tensor the model has no place for
// (Unimplemented); ModelConfig::ValidateParallel's for a tp_size the heads or the MLP do not
// divide; AlreadyExists if save_dir holds iteration 0; file-system errors naming the path.
absl::StatusOr<HfImportResult> ImportHfCheckpoint(const HfImportOptions& options);

struct HfExportOptions {
  std::string load_dir;    // Our checkpoint.
  int64_t iteration = -1;  // < 0: the latest.
  std::string save_dir;    // Hugging Face directory to write (created; files replaced).
  std::optional<DType>
      dtype;  // Default: the source dtype a converted checkpoint records, else f32.
  // Tokenizer files to write when the checkpoint has none of its own (<load>/tokenizer/):
  // {destination name, source path} pairs, e.g. {"vocab.json", ".../encoder.json"}.
  std::vector<std::pair<std::string, std::string>> default_tokenizer_files;
  FileSystem* fs = &DefaultFileSystem();  // What both directories are read and written through.
};

struct HfExportResult {
  HfConfig config;
  DType dtype = DType::kF32;
  int64_t tensors = 0;
  std::vector<std::string> tokenizer_files;
};

// Errors: those of model_loading.h's ReadCheckpointModel / LoadParameters (a checkpoint without
// pretraining heads, e.g. a RACE fine-tuned BERT, fails there naming them); FailedPrecondition
// from HfConfigJson for a model Hugging Face's GPT-2 / BERT cannot express; InvalidArgument for
// a dtype other than f32, bf16, f16; file-system errors naming the path.
absl::StatusOr<HfExportResult> ExportHfCheckpoint(const HfExportOptions& options);

// The trainer state a converted checkpoint carries, parsed: nullopt for any other checkpoint
// (e.g. one pretraining wrote).
struct HfConversionState {
  DType hf_dtype = DType::kF32;
  HfConfig config;  // Token ids and model_type only (the model config is the checkpoint's).
};
std::optional<HfConversionState> ParseHfConversionState(const std::string& trainer_state_json);

}  // namespace checkpoint
}  // namespace mt

#endif  // MT_CHECKPOINT_HF_CHECKPOINT_H_
