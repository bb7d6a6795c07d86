// Whole-file reads and directory listings for the evaluation readers (LAMBADA, RACE, WikiText).
// Every error is an absl::Status whose message names the path. Thread-safe (no shared state).
#ifndef MT_EVAL_TEXT_FILE_H_
#define MT_EVAL_TEXT_FILE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {
namespace eval {

// The bytes of a whole file. NotFound (no such file), PermissionDenied, FailedPrecondition (a
// directory) or another errno-derived code, each naming the path.
absl::StatusOr<std::string> ReadTextFile(const std::string& path);

// The names (not paths) of the regular files directly in `dir` whose names end in `suffix`,
// sorted bytewise (so the order does not depend on the file system). NotFound if `dir` does not
// exist, FailedPrecondition if it is not a directory, errno-derived codes otherwise; each names
// `dir`.
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir,
                                                   absl::string_view suffix);

}  // namespace eval
}  // namespace mt

#endif  // MT_EVAL_TEXT_FILE_H_
