// Fuzz target: SafetensorsReader::Open on an arbitrary file, then every tensor read back. Open
// must fail with a status or give entries that tile the data region, each readable.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "checkpoint/safetensors.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::WriteScratchFile(
      "t.safetensors", absl::string_view(reinterpret_cast<const char*>(data), size));
  auto reader = mt::checkpoint::SafetensorsReader::Open(path);
  if (!reader.ok()) return 0;
  uint64_t end = 0;
  for (const mt::checkpoint::SafetensorsEntry& e : reader->entries()) {
    CHECK_EQ(e.begin, end) << e.name;
    end = e.end;
    CHECK(reader->Find(e.name) == &e) << e.name;
    auto tensor = reader->ReadTensor(e.name);
    CHECK(tensor.ok()) << tensor.status();
  }
  CHECK(reader->Find("__metadata__") == nullptr);
  return 0;
}
