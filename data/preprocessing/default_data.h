// The embedded default corpus as indexed datasets: the Debian `fortunes` text (which
// tools/setup.sh installs) preprocessed for GPT-2 and for BERT, for the quickstart and the tests.
//
//   ASSIGN_OR_RETURN(DefaultData data, MakeDefaultData(DefaultDataConfig()));
//   // data.gpt2_prefix = "~/.cache/megatron-cpp/data/fortunes_gpt2_text_document"
//
// Corpus: every regular file of the corpus directory whose name does not end in ".dat" or ".u8"
// (the strfile indexes), in name order; each fortune (text between lines holding only "%") is one
// document. Outputs, in the output directory:
//   fortunes_gpt2_text_document.{bin,idx}   GPT-2 BPE, <|endoftext|> after each document
//   fortunes_bert_text_sentence.{bin,idx}   BERT WordPiece, one sequence per sentence
//                                           (sentence_splitter.h), no EOD
// (documents shuffled with a fixed seed unless DefaultDataConfig::shuffle_documents is false),
// each with a stamp file (<prefix>.stamp) that records what it was made from: a format version,
// the preprocessing settings, the tokenizer's asset files and every corpus file (path, size,
// modification time in ns), then the output files' sizes. A dataset is rebuilt unless its stamp
// matches the current inputs and settings and both outputs exist with the recorded sizes; the
// stamp is written after the outputs, so an interrupted build is redone. (Changes to tokenizer
// or preprocessing code that alter the ids must bump kDefaultDataVersion.)
//
// Thread-compatible: concurrent calls on one output directory do not corrupt it (every file is
// replaced atomically) but may both do the work.
#ifndef MT_DATA_PREPROCESSING_DEFAULT_DATA_H_
#define MT_DATA_PREPROCESSING_DEFAULT_DATA_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/preprocessing/preprocess.h"

namespace mt {
namespace data {

inline constexpr int kDefaultDataVersion = 2;
inline constexpr char kDefaultCorpusDir[] = "/usr/share/games/fortunes";
inline constexpr char kGpt2DefaultDataName[] = "fortunes_gpt2_text_document";
inline constexpr char kBertDefaultDataName[] = "fortunes_bert_text_sentence";

// $MT_CORPUS_DIR if set and non-empty, else kDefaultCorpusDir.
std::string DefaultCorpusDir();
// $MT_DATA_DIR if set and non-empty, else $HOME/.cache/megatron-cpp/data (HOME unset or empty:
// /tmp/megatron-cpp/data).
std::string DefaultDataDir();

// The corpus files of `dir` (rules above), sorted. NotFound (saying how to install the corpus)
// if the directory does not exist or holds no such file.
absl::StatusOr<std::vector<std::string>> ListCorpusFiles(const std::string& dir);

struct DefaultDataConfig {
  std::string corpus_dir = DefaultCorpusDir();
  std::string output_dir = DefaultDataDir();  // Created if missing.
  int workers = 0;                            // Preprocessing threads; 0 = hardware concurrency.
  bool force = false;                         // Rebuild even when up to date.
  // Shuffle the documents with a fixed seed after preprocessing. The corpus files are topics in
  // name order ("art" ... "zippy"), and Megatron splits train/valid/test by contiguous document
  // ranges, so without shuffling the validation split would be whole unseen topics.
  bool shuffle_documents = true;
  uint64_t shuffle_seed = 1234;
};

struct DefaultData {
  std::string gpt2_prefix;  // output_dir/fortunes_gpt2_text_document
  std::string bert_prefix;  // output_dir/fortunes_bert_text_sentence
  bool gpt2_built = false;  // False when the existing dataset was up to date.
  bool bert_built = false;
  PreprocessStats gpt2_stats;  // Zero unless built.
  PreprocessStats bert_stats;
};

// Builds whichever of the two datasets is missing or out of date. Errors: NotFound for a missing
// corpus or tokenizer asset, errno-derived statuses for the output directory, and whatever
// Preprocess returns. `progress` (optional) is passed to Preprocess.
absl::StatusOr<DefaultData> MakeDefaultData(const DefaultDataConfig& config,
                                            const ProgressCallback& progress = nullptr);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_PREPROCESSING_DEFAULT_DATA_H_
