// Preprocessing: text corpus -> Megatron indexed dataset (.bin/.idx), as Megatron-LM's
// tools/preprocess_data.py does it, streaming in bounded memory on all cores.
//
// Pipeline: the calling thread reads the input in chunks of whole documents (input_reader.h) and
// hands them to `workers` threads, which parse (JSON), split sentences if asked, and tokenise; the
// calling thread writes finished chunks in input order through IndexedDatasetWriter. At most
// max_chunks_in_flight chunks exist at once, so memory is bounded by
//   (max_chunks_in_flight) x (chunk_bytes of input + its token ids) + the tokenizer
//   + the writer's index arrays (4 bytes per sequence + 8 per document; the .idx needs them whole)
// whatever the input size. The output does not depend on the number of workers or the chunk size.
//
// Per document (a JSON line's value at json_key, or a text document):
//   sentences = split_sentences ? SplitSentences(text) (sentence_splitter.h) : {text}
//   each sentence is tokenised; sentences with no tokens are dropped; with append_eod the
//   tokenizer's end-of-document id is appended to the last one; each sentence is one sequence
//   and the document is the group of them. A document with no tokens is skipped (counted in
//   PreprocessStats::empty_documents), as Megatron's tool did.
// GPT-2: --append_eod, no sentence splitting (one sequence per document). BERT: split_sentences,
// no EOD (BERT's vocabulary has none; Megatron's BERT examples preprocess this way, and the BERT
// dataset takes document boundaries from the index); append_eod with a tokenizer that has no EOD
// is an error.
//
// The output is written to prefix.bin / prefix.idx exactly (Megatron's tool adds
// "_<key>_<document|sentence>"; pass such a prefix to get Megatron's names). Missing parent
// directories are created. Both files appear only when complete: on any error nothing is left at
// the prefix (an older dataset there is left untouched).
#ifndef MT_DATA_PREPROCESSING_PREPROCESS_H_
#define MT_DATA_PREPROCESSING_PREPROCESS_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/fields.h"
#include "data/preprocessing/input_reader.h"
#include "data/tokenizers/tokenizer.h"

namespace mt {
namespace data {

struct PreprocessConfig {
  std::vector<std::string> inputs;  // Files, read in order.
  InputFormat input_format = InputFormat::kJsonl;
  std::string json_key = "text";     // kJsonl: the key whose string value is the text.
  std::string document_separator;    // kText: separator line ("" = a blank line).
  std::string output_prefix;         // Writes output_prefix.bin / .idx.
  bool append_eod = false;           // Append the tokenizer's EOD to each document.
  bool split_sentences = false;      // One sequence per sentence.
  int workers = 0;                   // Tokenising threads; 0 = hardware concurrency.
  int64_t chunk_bytes = 1 << 20;     // Input bytes per chunk (whole documents).
  int max_chunks_in_flight = 0;      // 0 = 2 * workers + 2.
  double progress_interval_s = 2.0;  // Seconds between progress callbacks.

  // The fields //data:preprocess takes as flags of the same names (core/config_flags.h); it
  // takes inputs as --input (a comma-separated list) and chunk_bytes as --chunk_mb.
  template <typename Self, typename V>
  static void Fields(Self& self, V& v) {
    v("input_format", &self.input_format,
      "jsonl: one JSON object per line, text at --json_key. text: plain text, documents "
      "separated by lines equal to --document_separator.",
      kInputFormatNames);
    v("json_key", &self.json_key, "JSON key holding the document text (--input_format=jsonl).");
    v("document_separator", &self.document_separator,
      "Line that separates documents with --input_format=text (default: a blank line; the "
      "fortunes corpus uses %).");
    v("output_prefix", &self.output_prefix, "Writes PREFIX.bin and PREFIX.idx.");
    v("append_eod", &self.append_eod, "Append the end-of-document token to each document (GPT-2).");
    v("split_sentences", &self.split_sentences, "Write one sequence per sentence (BERT).");
    v("workers", &self.workers, "Tokenising threads; 0 = all cores.");
    v("progress_interval_s", &self.progress_interval_s,
      "Seconds between progress lines on stderr; 0 = every chunk.");
  }

  // InvalidArgument naming the field: no inputs, an empty input path, empty output_prefix,
  // empty json_key with kJsonl, workers < 0, chunk_bytes < 1, max_chunks_in_flight < 0,
  // progress_interval_s < 0.
  absl::Status Validate() const;
};

struct PreprocessProgress {
  int64_t documents = 0;     // Documents written so far.
  int64_t bytes_in = 0;      // Input bytes of the chunks written so far.
  int64_t total_bytes = -1;  // Input size, or -1 if unknown (not a regular file).
  double seconds = 0;        // Since the start.
};

struct PreprocessStats {
  int64_t documents = 0;        // Documents written.
  int64_t empty_documents = 0;  // Documents skipped because they had no tokens.
  int64_t sequences = 0;
  int64_t tokens = 0;
  int64_t bytes_in = 0;        // Input bytes read.
  int64_t bytes_out = 0;       // Size of .bin plus .idx.
  double seconds = 0;          // Wall time of Preprocess.
  int workers = 0;             // Threads used.
  int64_t peak_rss_bytes = 0;  // Of the whole process so far (PeakRssBytes()).
};

// Called on the calling thread about every progress_interval_s seconds while writing.
using ProgressCallback = std::function<void(const PreprocessProgress&)>;

// Runs the pipeline. Errors (the first in input order wins; nothing is written):
//   InvalidArgument  bad config; append_eod with a tokenizer without an EOD id; a JSON line that
//                    does not parse, is not an object, lacks json_key or whose value is not a
//                    string (the message names "file:line");
//   NotFound etc.    an input cannot be opened or the output cannot be created (names the path);
//   DataLoss         a read error.
// `tokenizer` must outlive the call; its const methods are called from the worker threads.
absl::StatusOr<PreprocessStats> Preprocess(const PreprocessConfig& config,
                                           const Tokenizer& tokenizer,
                                           const ProgressCallback& progress = nullptr);

// The process's peak resident set size in bytes (getrusage ru_maxrss), 0 if unavailable.
int64_t PeakRssBytes();

// One line of progress: "1234 documents, 12.3 / 125.0 MB (9.8%), 8.1 MB/s, ETA 14 s" (no ETA and
// no percentage when the total is unknown). MB = 10^6 bytes.
std::string FormatProgress(const PreprocessProgress& p);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_PREPROCESSING_PREPROCESS_H_
