// Fuzz target: the parser of latest_checkpointed_iteration.txt (LatestIteration). Input: the file's
// bytes. Anything but a run of at most 18 digits (with surrounding whitespace) must be DataLoss;
// a number names a checkpoint that does not exist here, so that too must be an error.
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  mt::fuzz::WriteScratchFile(mt::checkpoint::kLatestIterationFile,
                             absl::string_view(reinterpret_cast<const char*>(data), size));
  auto iteration = mt::checkpoint::LatestIteration(mt::fuzz::ScratchDir());
  CHECK(absl::IsDataLoss(iteration.status())) << iteration.status();
  return 0;
}
