// Prints an indexed dataset: its dtype, sequence and document counts, then each document's token
// ids, one document per line.
//
//   bazel run //data:dump_dataset -- --prefix=/path/to/corpus_text_document
//
// A missing or corrupt dataset prints one line naming the file and the problem, and exits 1.
#include <cstdlib>
#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "core/tool_main.h"
#include "data/indexed/dump.h"
#include "data/indexed/indexed_dataset.h"
#include "gflags/gflags.h"

DEFINE_string(prefix, "", "dataset path without the .bin/.idx extension");

int main(int argc, char** argv) {
  return mt::ToolMain("dump_dataset",
                      "dump_dataset --prefix=PATH: print an indexed dataset's tokens", argc, argv,
                      []() -> absl::Status {
                        if (FLAGS_prefix.empty()) {
                          return absl::InvalidArgumentError(
                              "--prefix is required (the dataset path without .bin/.idx)");
                        }
                        // Under `bazel run` the binary runs in its runfiles tree; resolve a
                        // relative prefix against the directory the user ran Bazel from.
                        std::string prefix = FLAGS_prefix;
                        const char* cwd = std::getenv("BUILD_WORKING_DIRECTORY");
                        if (prefix[0] != '/' && cwd != nullptr)
                          prefix = std::string(cwd) + "/" + prefix;
                        auto dataset = mt::data::IndexedDataset::Open(prefix);
                        if (!dataset.ok()) return dataset.status();
                        std::ios::sync_with_stdio(false);
                        mt::data::WriteDump(**dataset, std::cout);
                        std::cout.flush();
                        if (!std::cout.good())
                          return absl::DataLossError("cannot write the dump to stdout");
                        return absl::OkStatus();
                      });
}
