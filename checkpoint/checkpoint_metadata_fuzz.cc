// Fuzz target: a shard's metadata.json as the checkpoint readers see it (ReadShardMetadata, and
// LatestIteration, which checks the shard the pointer names). Input: the metadata.json bytes of
// shard 0 of iteration 1, which latest_checkpointed_iteration.txt names. Every malformed file must
// give a status, never a crash.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "checkpoint/checkpoint.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // scratch/latest_checkpointed_iteration.txt and scratch/iter_0000001/mp_rank_00/metadata.json.
  const std::string shard = mt::checkpoint::IterationDirName(1) + "/mp_rank_00";
  static const std::string dir = [&] {
    mt::fuzz::WriteScratchFile(mt::checkpoint::kLatestIterationFile, "1\n");
    mt::fuzz::MakeScratchDirs(shard);
    return mt::fuzz::ScratchDir();
  }();
  mt::fuzz::WriteScratchFile(shard + "/" + mt::checkpoint::kShardMetadataFile,
                             absl::string_view(reinterpret_cast<const char*>(data), size));
  (void)mt::checkpoint::ReadShardMetadata(dir, 1, 0);
  (void)mt::checkpoint::LatestIteration(dir);
  return 0;
}
