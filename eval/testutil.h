// Test helpers for eval/: fixture paths and temporary files (testonly). A file or directory that
// cannot be made fails the calling test (ADD_FAILURE); the installed tokenizers are
// data/tokenizers/testutil.h's.
#ifndef MT_EVAL_TESTUTIL_H_
#define MT_EVAL_TESTUTIL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mt {
namespace eval {

// The runfiles path of eval/testdata/<relative>.
std::string TestDataPath(absl::string_view relative);

// Writes `contents` to <test temp dir>/<relative> (creating its directories) and returns the path.
std::string WriteTestFile(absl::string_view relative, absl::string_view contents);

// Creates <test temp dir>/<relative> and its parents; returns the path.
std::string MakeTestDir(absl::string_view relative);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_TESTUTIL_H_
