// Test helpers for eval/: fixture paths, temporary files and the installed tokenizers.
// Test-only; CHECK-fails on any error (a broken test environment, not a test result).
#ifndef MT_EVAL_TESTUTIL_H_
#define MT_EVAL_TESTUTIL_H_

#include <string>

#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"

namespace mt {
namespace eval {

// The runfiles path of eval/testdata/<relative>.
std::string TestDataPath(absl::string_view relative);

// Writes `contents` to <test temp dir>/<relative> (creating its directories) and returns the path.
std::string WriteTestFile(absl::string_view relative, absl::string_view contents);

// Creates <test temp dir>/<relative> and its parents; returns the path.
std::string MakeTestDir(absl::string_view relative);

// The tokenizer data::CreateTokenizer(name) builds, made once per process and never freed.
const data::Tokenizer& TestTokenizer(absl::string_view name);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_TESTUTIL_H_
