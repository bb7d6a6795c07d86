// Turns a text corpus into a Megatron indexed dataset (prefix.bin / prefix.idx).
//
//   bazel run //data:preprocess -- --input=corpus.jsonl --json_key=text --tokenizer=gpt2
//       --output_prefix=/data/my-gpt2_text_document --append_eod
//   bazel run //data:preprocess -- --input=corpus.jsonl --tokenizer=bert
//       --output_prefix=/data/my-bert_text_sentence --split_sentences
//   bazel run //data:preprocess -- --input_format=text --document_separator=%
//       --input=/usr/share/games/fortunes/fortunes --tokenizer=gpt2 --output_prefix=/tmp/f
//       --append_eod
//
// --input takes one file or a comma-separated list (read in order). Input is streamed in bounded
// memory on --workers threads (data/preprocessing/preprocess.h has the rules: documents, sentences,
// EOD, empty documents). The resolved settings go to stdout at the start, progress lines to stderr
// every --progress_interval_s seconds, and a summary ("name: value" lines: documents, sequences,
// tokens, bytes in/out, seconds, MB/s, peak RSS) to stdout at the end. Errors are one line on
// stderr and a non-zero exit, and leave no output files.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/config_flags.h"
#include "core/status.h"
#include "core/tool_main.h"
#include "data/indexed/indexed_dataset.h"
#include "data/preprocessing/preprocess.h"
#include "data/tokenizers/factory.h"
#include "gflags/gflags.h"

// The settings of PreprocessConfig are flags of their own names (its Fields); these are not.
DEFINE_string(input, "", "Input file, or a comma-separated list of files read in order.");
DEFINE_string(tokenizer, "", "Tokenizer: gpt2 or bert.");
DEFINE_double(chunk_mb, 1.0, "Input megabytes (10^6 bytes) handed to a worker at a time.");

namespace mt::data {
namespace {

absl::Status Run(const ConfigFlags<PreprocessConfig>& flags) {
  PreprocessConfig config;
  // Every field given is applied even when an enum is not one of its names: report that after
  // the missing flags, as before.
  const absl::Status applied = flags.ApplyGiven(&config);
  if (FLAGS_input.empty()) return absl::InvalidArgumentError("--input is required");
  if (config.output_prefix.empty()) {
    return absl::InvalidArgumentError("--output_prefix is required");
  }
  if (FLAGS_tokenizer.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tokenizer is required (", absl::StrJoin(TokenizerNames(), " or "), ")"));
  }
  if (!(FLAGS_chunk_mb > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("--chunk_mb must be > 0, got ", FLAGS_chunk_mb));
  }
  RETURN_IF_ERROR(applied);
  config.inputs = absl::StrSplit(FLAGS_input, ',', absl::SkipEmpty());
  config.chunk_bytes = std::max<int64_t>(1, static_cast<int64_t>(FLAGS_chunk_mb * 1e6));
  RETURN_IF_ERROR(config.Validate());
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, CreateTokenizer(FLAGS_tokenizer));

  const std::string format_detail =
      config.input_format == InputFormat::kJsonl
          ? absl::StrCat("json_key=", config.json_key)
          : absl::StrCat("document_separator='", config.document_separator, "'");
  std::printf(
      "preprocess: input=%s input_format=%s %s tokenizer=%s output_prefix=%s "
      "append_eod=%d split_sentences=%d workers=%d chunk_mb=%g\n",
      absl::StrJoin(config.inputs, ",").c_str(),
      std::string(InputFormatName(config.input_format)).c_str(), format_detail.c_str(),
      FLAGS_tokenizer.c_str(), config.output_prefix.c_str(), config.append_eod,
      config.split_sentences, config.workers, FLAGS_chunk_mb);
  std::fflush(stdout);
  ASSIGN_OR_RETURN(PreprocessStats stats,
                   Preprocess(config, *tokenizer, [](const PreprocessProgress& p) {
                     std::fprintf(stderr, "preprocess: %s\n", FormatProgress(p).c_str());
                   }));
  const double mb_in = stats.bytes_in / 1e6;
  std::printf(
      "documents: %lld\n"
      "empty_documents_skipped: %lld\n"
      "sequences: %lld\n"
      "tokens: %lld\n"
      "bytes_in: %lld\n"
      "bytes_out: %lld\n"
      "seconds: %.3f\n"
      "mb_per_s: %.2f\n"
      "workers: %d\n"
      "peak_rss_mb: %.1f\n"
      "output: %s %s\n",
      static_cast<long long>(stats.documents), static_cast<long long>(stats.empty_documents),
      static_cast<long long>(stats.sequences), static_cast<long long>(stats.tokens),
      static_cast<long long>(stats.bytes_in), static_cast<long long>(stats.bytes_out),
      stats.seconds, stats.seconds > 0 ? mb_in / stats.seconds : 0.0, stats.workers,
      stats.peak_rss_bytes / 1e6, BinPath(config.output_prefix).c_str(),
      IndexPath(config.output_prefix).c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace mt::data

int main(int argc, char** argv) {
  const mt::ConfigFlags<mt::data::PreprocessConfig> flags{mt::data::PreprocessConfig()};
  return mt::ToolMain(
      "preprocess",
      "--input=FILE[,FILE...] --tokenizer=gpt2|bert --output_prefix=PREFIX [--input_format=jsonl|"
      "text] [--json_key=text] [--document_separator=SEP] [--append_eod] [--split_sentences] "
      "[--workers=N]\nWrites a Megatron indexed dataset PREFIX.bin / PREFIX.idx.",
      argc, argv, [&] { return mt::data::Run(flags); });
}
