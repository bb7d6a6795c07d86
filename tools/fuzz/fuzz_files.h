// Scratch files for fuzz targets whose reader takes a path: one private directory per process
// (under $TEST_TMPDIR, else $TMPDIR or /tmp), removed at exit.
#ifndef MT_TOOLS_FUZZ_FUZZ_FILES_H_
#define MT_TOOLS_FUZZ_FUZZ_FILES_H_

#include <string>

#include "absl/strings/string_view.h"

namespace mt {
namespace fuzz {

// The process's scratch directory (created on first use; CHECK-style abort if it cannot be).
const std::string& ScratchDir();

// Creates ScratchDir()/relative_dir and its parents; aborts on failure.
void MakeScratchDirs(absl::string_view relative_dir);

// Writes `bytes` to ScratchDir()/name (replacing it) and returns the path; aborts on failure
// (a broken test machine, not a finding).
std::string WriteScratchFile(absl::string_view name, absl::string_view bytes);

}  // namespace fuzz
}  // namespace mt

#endif  // MT_TOOLS_FUZZ_FUZZ_FILES_H_
