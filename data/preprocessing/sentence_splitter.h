// A small rule-based English sentence splitter for preprocessing BERT data (Megatron uses NLTK's
// punkt model, which is not available here; this is a documented approximation, not a replica).
//
// A sentence ends
//   (a) after a run of terminators '.', '!', '?' (e.g. "...", "?!"), optionally followed by closing
//       quotes or brackets (" ' ) ] and the UTF-8 ” ’), when whitespace follows and the next
//       non-whitespace character is an ASCII uppercase letter or an opening quote or bracket
//       (" ' ( [ and the UTF-8 “ ‘); except that a run that is a single '.' does not end a
//       sentence when the word before it is an abbreviation (kAbbreviations, case-sensitive, e.g.
//       "Mr", "Dr", "e.g", "U.S") or a single uppercase letter (an initial, "J. Smith");
//   (b) at a paragraph break: a run of whitespace holding two or more '\n' ("\n\n", "\n \r\n").
// Each sentence is trimmed of surrounding whitespace (space, \t, \n, \r, \v, \f); sentences that
// are empty after trimming are dropped. Nothing else is changed, so the sentences are views into
// the text in order, and text between them is whitespace only.
//
// Pure function; thread-safe.
#ifndef MT_DATA_PREPROCESSING_SENTENCE_SPLITTER_H_
#define MT_DATA_PREPROCESSING_SENTENCE_SPLITTER_H_

#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace mt {
namespace data {

// The words before a '.' that do not end a sentence (rule (a)); the word is the run of ASCII
// letters and inner '.' just before the final '.', so "e.g." is checked as "e.g".
absl::Span<const absl::string_view> SentenceAbbreviations();

// The sentences of `text` (views into it), by the rules above. Empty or all-whitespace text gives
// no sentences.
std::vector<absl::string_view> SplitSentences(absl::string_view text);

}  // namespace data
}  // namespace mt

#endif  // MT_DATA_PREPROCESSING_SENTENCE_SPLITTER_H_
