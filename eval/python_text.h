// Python 3 str semantics the evaluation protocols depend on: which characters are whitespace
// (str.isspace(), str.strip(), str.split() and the \s of re on str patterns all use one set), and
// whitespace stripping and splitting on UTF-8 text.
//
// The whitespace set is Python's, not C's isspace(): U+0009..U+000D, U+001C..U+001F, U+0020,
// U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029, U+202F, U+205F, U+3000. Text is UTF-8;
// the multi-byte members are recognised by their byte sequences, which in well-formed UTF-8 can
// only be those characters. Bytes that are not valid UTF-8 are never whitespace.
//
// All functions are pure and thread-safe; returned views point into the argument.
#ifndef MT_EVAL_PYTHON_TEXT_H_
#define MT_EVAL_PYTHON_TEXT_H_

#include <cstddef>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace mt {
namespace eval {

// The length in bytes (1..3) of the whitespace character `s` starts with, or 0 if it does not
// start with one (or is empty).
size_t PySpacePrefix(absl::string_view s);

// The length in bytes (1..3) of the whitespace character `s` ends with, or 0.
size_t PySpaceSuffix(absl::string_view s);

// str.strip() with no argument: `s` without leading and trailing whitespace.
absl::string_view PyStrip(absl::string_view s);

// str.split() with no argument: the maximal runs of non-whitespace characters, in order (none for
// an empty or all-whitespace string).
std::vector<absl::string_view> PySplit(absl::string_view s);

// re.sub(r"\s+", " ", s): every run of whitespace characters becomes one ASCII space.
std::string PyCollapseSpaces(absl::string_view s);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_PYTHON_TEXT_H_
