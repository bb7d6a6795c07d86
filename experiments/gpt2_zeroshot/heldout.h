// Held-out evaluation data from documents a GPT training run did not see: the test split of an
// indexed GPT-2 dataset (data/gpt_dataset/gpt_dataset.h, SplitDocuments), decoded back to text and
// written in the two zero-shot harnesses' input formats:
//   - WikiText-103's word-level tokenised format (what eval/wikitext.h's DetokenizeWikiText
//     undoes): one document per paragraph line, " tokens \n", separated by " \n" lines;
//   - LAMBADA's jsonl ({"text": ...} per line), the last word being the one to predict.
//
//   ASSIGN_OR_RETURN(HeldOutFiles f, WriteHeldOut(prefix, "90,5,5", 200, *gpt2, dir));
//   // f.wikitext = dir/heldout.wiki.tokens, f.lambada = dir/heldout_lambada.jsonl
//
// Pure functions, and WriteHeldOut which only reads the dataset and writes the two files.
#ifndef MT_EXPERIMENTS_GPT2_ZEROSHOT_HELDOUT_H_
#define MT_EXPERIMENTS_GPT2_ZEROSHOT_HELDOUT_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"

namespace mt {
namespace experiments {

// One paragraph of plain text in WikiText-103's tokenisation (no leading space or newline):
// whitespace runs become one space; in each word, leading ( [ { " and trailing . , ; : ! ? " ) ] }
// become tokens of their own (a run of dots, "...", stays on its word); a final 's or 'S is
// split off (" 's"); a hyphen between letters or digits becomes " @-@ ", and a comma or a point
// between digits " @,@ " / " @.@ ". DetokenizeWikiText of " " + result + " \n" gives back the
// whitespace-collapsed text for text without stray quotes or brackets (tested).
//   "A well-known fact (3.5 kg), isn't it?" ->
//   "A well @-@ known fact ( 3 @.@ 5 kg ) , isn't it ?"
std::string ToWikiTextTokens(absl::string_view text);

// A LAMBADA-style line from a document: its words (whitespace collapsed) with the last word's
// trailing non-alphanumeric characters removed; nullopt unless it has at least `min_words` words
// and the last word is then all letters (ASCII) and at least 2 long.
//   "Never put off till tomorrow what you can do today." -> "... what you can do today"
std::optional<std::string> ToLambadaText(absl::string_view text, int min_words);

// LAMBADA's own design, in a rule applied to the text alone: its passages were kept when the last
// word follows from the wider passage, not from the last sentence. Here: the longest prefix of
// `text` that ends with a sentence's last word (before . ! ? ; : and closing quotes or brackets,
// or at the end of the text) which also occurs earlier in the prefix (as a word with its leading
// and trailing non-alphanumeric characters removed, case kept), written as ToLambadaText writes
// it, with at least `min_words` words and accepted by `fits` (e.g. a token budget); nullopt when
// no prefix qualifies.
//   "The cat sat. A dog sat. Then the cat ran off." -> "The cat sat. A dog sat"  ("sat" again)
std::optional<std::string> LambadaCopyPassage(absl::string_view text, int min_words,
                                              const std::function<bool(absl::string_view)>& fits);

// The WikiText file of `documents`: " \n" then, per document with any text, " " +
// ToWikiTextTokens(doc) + " \n \n".
std::string WikiTextFile(const std::vector<std::string>& documents);

struct HeldOutFiles {
  std::string wikitext;   // Path of the WikiText-format file.
  std::string lambada;    // Path of the LAMBADA jsonl.
  int64_t documents = 0;  // Test-split documents used (at most max_documents).
  int64_t lambada_examples = 0;
  int64_t first_document = 0;  // Their index range in the dataset: [first, first + documents).
  std::vector<std::string> lambada_lines;  // The LAMBADA file's texts, in order.
};

// Writes `dir`/heldout.wiki.tokens (every document of `texts`) and `dir`/heldout_lambada.jsonl:
// per document, its ToLambadaText(text, 10) line when the document has at most `max_tokens` - 4
// GPT-2 tokens, or with `copy_targets` its LambadaCopyPassage(text, 10) of at most that many.
// Internal naming a file that cannot be written; the tokenizer's errors.
absl::StatusOr<HeldOutFiles> WriteHeldOutTexts(const std::vector<std::string>& texts,
                                               int64_t max_tokens, const data::Tokenizer& gpt2,
                                               const std::string& dir, bool copy_targets = false);

// Decodes (with `gpt2`, dropping its end-of-document id) the first `max_documents` documents of
// the test split of the dataset at `prefix` under `split` and writes `dir`/heldout.wiki.tokens and
// `dir`/heldout_lambada.jsonl (documents of at least 10 words and at most `max_tokens` - 4 GPT-2
// tokens, so that a model of `max_tokens` positions fits them; with `copy_targets` their
// LambadaCopyPassage lines, as WriteHeldOutTexts writes them). Errors: the dataset's and
// SplitDocuments's; FailedPrecondition when the test split is empty (naming the split); Internal
// naming a file that cannot be written.
// The documents of split `which` (0 train, 1 valid, 2 test) of the dataset at `prefix` under
// `split`, decoded with `gpt2` (its end-of-document id dropped): e.g. the training text of a
// baseline. InvalidArgument for another `which`; the dataset's and SplitDocuments's errors.
absl::StatusOr<std::vector<std::string>> DecodeSplit(const std::string& prefix,
                                                     const std::string& split, int which,
                                                     const data::Tokenizer& gpt2);

absl::StatusOr<HeldOutFiles> WriteHeldOut(const std::string& prefix, const std::string& split,
                                          int64_t max_documents, int64_t max_tokens,
                                          const data::Tokenizer& gpt2, const std::string& dir,
                                          bool copy_targets = false);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_GPT2_ZEROSHOT_HELDOUT_H_
