// Prints an indexed dataset: its dtype, sequence and document counts, then each document's token
// ids, one document per line.
//
//   bazel run //data:dump_dataset -- --prefix=/path/to/corpus_text_document
//
// A missing or corrupt dataset prints one line naming the file and the problem, and exits 1.
#include <cstdlib>
#include <iostream>
#include <string>

#include "data/indexed/dump.h"
#include "data/indexed/indexed_dataset.h"
#include "gflags/gflags.h"

DEFINE_string(prefix, "", "dataset path without the .bin/.idx extension");

int main(int argc, char** argv) {
  gflags::SetUsageMessage("dump_dataset --prefix=PATH: print an indexed dataset's tokens");
  gflags::ParseCommandLineFlags(&argc, &argv, /*remove_flags=*/true);
  if (FLAGS_prefix.empty()) {
    std::cerr << "dump_dataset: error: --prefix is required (the dataset path without .bin/.idx)\n";
    return 2;
  }
  // Under `bazel run` the binary runs in its runfiles tree; resolve a relative prefix against the
  // directory the user ran Bazel from.
  std::string prefix = FLAGS_prefix;
  const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
  if (prefix[0] != '/' && cwd != nullptr) prefix = std::string(cwd) + "/" + prefix;
  auto dataset = mt::data::IndexedDataset::Open(prefix);
  if (!dataset.ok()) {
    std::cerr << "dump_dataset: error: " << dataset.status().message() << "\n";
    return 1;
  }
  std::ios::sync_with_stdio(false);
  mt::data::WriteDump(**dataset, std::cout);
  std::cout.flush();
  return std::cout.good() ? 0 : 1;
}
