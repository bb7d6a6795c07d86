// The experiments' prose corpus: English text from installed Debian packages (tools/setup.sh),
// split into training documents and held-out documents that share no long word sequence with the
// training text, the training part tokenised for GPT-2 and BERT. What gpt2_zeroshot and
// race_finetune train on and build their held-out WikiText-, LAMBADA- and RACE-format sets from.
//
//   ASSIGN_OR_RETURN(ProseCorpus c, BuildProseCorpus(ProseCorpusConfig()));
//   // c.gpt2_prefix: ~/.cache/megatron-cpp/data/prose/prose_gpt2_text_document
//   // c.heldout: the held-out documents' text
//
// Sources (each skipped when its path is empty):
//   fortunes  /usr/share/games/fortunes (package fortunes): one document per fortune;
//   bible     the `bible` program (package bible-kjv, text in bible-kjv-text): the King James
//             Bible, one document per run of consecutive verses of a chapter holding at least
//             kBibleDocumentWords words;
//   jargon    /usr/share/doc/jargon-text/jargon.txt.gz (package jargon-text, read with gzip -dc):
//             the Jargon File's entries, one document per paragraph of at least 12 words.
// Nothing is fetched: a missing source is an error that names its Debian package.
#ifndef MT_EXPERIMENTS_COMMON_PROSE_CORPUS_H_
#define MT_EXPERIMENTS_COMMON_PROSE_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace experiments {

inline constexpr int kBibleDocumentWords = 40;
// Held-out documents sharing a run of this many words with the training text are dropped (the
// 13-gram overlap test of GPT-3's contamination analysis).
inline constexpr int kDedupWords = 13;

struct ProseDocument {
  std::string source;  // "fortunes", "bible" or "jargon".
  std::string text;    // Whitespace collapsed to single spaces.
};

// Parsers of each source's text (pure; tested on hand-written text).
// Fortunes: documents separated by lines holding only "%".
std::vector<std::string> SplitFortunes(absl::string_view text);
// `bible`'s output: "Book N" chapter headings, verses "  N text" with continuation lines.
// Consecutive verses of one chapter are joined until they hold `min_words` words (a chapter's
// shorter tail joins its last document).
std::vector<std::string> SplitBible(absl::string_view text, int min_words);
// The Jargon File's text: entries start with a line ":headword:..."; each paragraph (blank-line
// separated) of an entry's body with at least `min_words` words is a document, "{x}" cross
// references written as x.
std::vector<std::string> SplitJargon(absl::string_view text, int min_words);

// The lowercase alphanumeric words of `text` (other characters separate words).
std::vector<std::string> NormalizedWords(absl::string_view text);

struct HeldOutSplit {
  std::vector<ProseDocument> train, heldout;
  int64_t dropped_overlapping = 0;  // Held-out documents dropped for sharing a kDedupWords run.
};

// Shuffles `docs` with `seed`, holds out every `every`-th (the rest train), and drops each
// held-out document that shares a run of `dedup_words` NormalizedWords with any training document
// (or, exactly, any held-out document already kept).
HeldOutSplit SplitHeldOut(std::vector<ProseDocument> docs, int every, uint64_t seed,
                          int dedup_words = kDedupWords);

struct ProseCorpusConfig {
  std::string fortunes_dir = "/usr/share/games/fortunes";
  std::string bible_program = "bible";  // Found on PATH; empty: no Bible.
  std::string jargon_file = "/usr/share/doc/jargon-text/jargon.txt.gz";
  // Empty: DefaultDataDir()/prose, or .../prose_first<max_documents> when max_documents > 0.
  std::string output_dir;
  int heldout_every = 20;
  uint64_t seed = 1234;
  int64_t max_documents = 0;  // > 0: only the first this many documents (after shuffling).
};

struct ProseCorpus {
  std::string gpt2_prefix, bert_prefix;  // Indexed datasets of the training documents.
  std::vector<ProseDocument> train;      // What the datasets hold (for baselines).
  std::vector<ProseDocument> heldout;
  int64_t dropped_overlapping = 0;
  std::vector<std::string> sources;  // "bible (9,876 documents)", one per source read.
  std::string Describe() const;      // One sentence for a report.
};

// Reads the sources, splits, and writes output_dir/prose_train.jsonl and its GPT-2 (EOD appended)
// and BERT (sentence-split) datasets, unless a stamp shows they hold the same text already.
// Errors: NotFound naming the Debian package when a source is missing; Preprocess's.
absl::StatusOr<ProseCorpus> BuildProseCorpus(const ProseCorpusConfig& config);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_PROSE_CORPUS_H_
