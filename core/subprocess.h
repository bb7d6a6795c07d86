// Running another program and reading what it prints: the experiments' subprocesses (the jobs they
// launch, gnuplot) and the tools'. One place for fork/exec, PATH lookup and exit statuses.
#ifndef MT_CORE_SUBPROCESS_H_
#define MT_CORE_SUBPROCESS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace mt {

enum class Stderr { kInherit, kDiscard };

// Runs argv[0] (searched on PATH) with argv, in `cwd` when non-empty, and returns its standard
// output; its standard error passes through, or goes to /dev/null with Stderr::kDiscard. Internal
// naming the program and its exit status when it cannot run or exits non-zero; NotFound when the
// program is not on PATH.
absl::StatusOr<std::string> RunCommand(const std::vector<std::string>& argv,
                                       const std::string& cwd = "",
                                       Stderr stderr_to = Stderr::kInherit);

// The full path of `program` on PATH (or `program` itself when it holds a '/' and is executable),
// or empty.
std::string FindOnPath(absl::string_view program);

}  // namespace mt

#endif  // MT_CORE_SUBPROCESS_H_
