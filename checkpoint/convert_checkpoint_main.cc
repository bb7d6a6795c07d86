// Converts Hugging Face GPT-2 / BERT / Llama / Mistral / Mixtral checkpoints to the project's
// checkpoints and back (checkpoint/hf_checkpoint.h):
//
//   convert_checkpoint --from=hf --input=HF_DIR --save=DIR [--tensor_model_parallel_size=N]
//   convert_checkpoint --to=hf --input=CKPT_DIR --save=HF_DIR [--iteration=K] [--dtype=bf16]
//
// Errors are one line on stderr with a non-zero exit.
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/hf_checkpoint.h"
#include "checkpoint/hf_files.h"
#include "core/tool_main.h"
#include "data/tokenizers/assets.h"
#include "gflags/gflags.h"

DEFINE_string(from, "", "Source format: hf (a Hugging Face directory) to convert into ours.");
DEFINE_string(to, "", "Target format: hf, to convert one of our checkpoints into.");
DEFINE_string(input, "", "The directory to read (Hugging Face model or our checkpoint).");
DEFINE_string(save, "", "The directory to write.");
DEFINE_int32(tensor_model_parallel_size, 1, "--from=hf: tensor-parallel degree to save at.");
DEFINE_int64(iteration, -1, "--to=hf: iteration to export (-1: the latest).");
DEFINE_string(dtype, "",
              "--to=hf: dtype of the written tensors (f32, bf16, f16; default: the source "
              "dtype of a converted checkpoint, else f32).");
DEFINE_uint64(seed, 1234, "--from=hf: initial values of heads the file lacks.");

namespace {

// The installed tokenizer files under Hugging Face's names, for a checkpoint without its own.
std::vector<std::pair<std::string, std::string>> InstalledTokenizerFiles() {
  std::vector<std::pair<std::string, std::string>> files;
  for (auto [name, path] : {std::pair<const char*, absl::StatusOr<std::string>>{
                                "vocab.json", mt::data::Gpt2EncoderJson()},
                            {"merges.txt", mt::data::Gpt2VocabBpe()},
                            {"vocab.txt", mt::data::BertVocabTxt()}}) {
    if (path.ok()) files.push_back({name, *path});
  }
  return files;
}

absl::Status Import() {
  mt::checkpoint::HfImportOptions o;
  o.input_dir = FLAGS_input;
  o.save_dir = FLAGS_save;
  o.tp_size = FLAGS_tensor_model_parallel_size;
  o.seed = FLAGS_seed;
  if (o.tp_size < 1) return absl::InvalidArgumentError("--tensor_model_parallel_size must be >= 1");
  auto r = mt::checkpoint::ImportHfCheckpoint(o);
  if (!r.ok()) return r.status();
  std::printf(
      "converted %s (%s, %s) into %s: tensor_model_parallel_size %d, padded vocabulary "
      "%lld, iteration 0, no optimizer state (load it with --finetune)\n",
      FLAGS_input.c_str(), r->config.model.ArchitectureName().c_str(),
      std::string(mt::DTypeName(r->source_dtype)).c_str(), FLAGS_save.c_str(), o.tp_size,
      static_cast<long long>(r->padded_vocab));
  if (!r->initialized.empty()) {
    std::printf("not in the file, initialised from --seed: %s\n",
                absl::StrJoin(r->initialized, ", ").c_str());
  }
  std::printf("tokenizer files: %s\n", r->tokenizer_files.empty()
                                           ? "none"
                                           : absl::StrJoin(r->tokenizer_files, ", ").c_str());
  return absl::OkStatus();
}

absl::Status Export() {
  mt::checkpoint::HfExportOptions o;
  o.load_dir = FLAGS_input;
  o.save_dir = FLAGS_save;
  o.iteration = FLAGS_iteration;
  if (!FLAGS_dtype.empty()) {
    auto dtype = mt::ParseDType(FLAGS_dtype);
    if (!dtype.ok() || !mt::IsFloating(*dtype)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--dtype=", FLAGS_dtype, ": must be f32, bf16 or f16"));
    }
    o.dtype = *dtype;
  }
  o.default_tokenizer_files = InstalledTokenizerFiles();
  auto r = mt::checkpoint::ExportHfCheckpoint(o);
  if (!r.ok()) return r.status();
  std::printf(
      "exported %s (%s) into %s: config.json, %s (%lld tensors, %s), tokenizer files: %s\n",
      FLAGS_input.c_str(), r->config.model.ArchitectureName().c_str(), FLAGS_save.c_str(),
      mt::checkpoint::kHfWeightsFile, static_cast<long long>(r->tensors),
      std::string(mt::DTypeName(r->dtype)).c_str(),
      r->tokenizer_files.empty() ? "none" : absl::StrJoin(r->tokenizer_files, ", ").c_str());
  return absl::OkStatus();
}

absl::Status Run() {
  if (FLAGS_input.empty()) {
    return absl::InvalidArgumentError("--input is required (the directory to read)");
  }
  if (FLAGS_save.empty()) {
    return absl::InvalidArgumentError("--save is required (the directory to write)");
  }
  if (FLAGS_from == "hf" && FLAGS_to.empty()) return Import();
  if (FLAGS_to == "hf" && FLAGS_from.empty()) return Export();
  return absl::InvalidArgumentError(
      "give exactly one of --from=hf (Hugging Face -> ours) and --to=hf (ours -> Hugging Face)");
}

}  // namespace

int main(int argc, char** argv) {
  return mt::ToolMain(
      "convert_checkpoint",
      "Converts Hugging Face GPT-2 / BERT / Llama / Mistral / Mixtral checkpoints to ours and "
      "back:\n"
      "  convert_checkpoint --from=hf --input=HF_DIR --save=DIR [--tensor_model_parallel_size=N]\n"
      "  convert_checkpoint --to=hf --input=CKPT_DIR --save=HF_DIR [--iteration=K] [--dtype=bf16]",
      argc, argv, Run);
}
