// Builds the embedded default corpus datasets (the Debian fortunes text as GPT-2 and BERT
// indexed datasets; data/preprocessing/default_data.h), skipping whichever is up to date.
//
//   bazel run //data:make_default_data                        # into $MT_DATA_DIR or
//                                                             # ~/.cache/megatron-cpp/data
//   bazel run //data:make_default_data -- --output_dir=DIR [--corpus_dir=DIR] [--force]
//
// Prints one line per dataset (its prefix and whether it was built or up to date). Errors are
// one line on stderr and a non-zero exit.
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "core/status.h"
#include "core/tool_main.h"
#include "data/preprocessing/default_data.h"
#include "gflags/gflags.h"

DEFINE_string(output_dir, "",
              "Where the datasets go (default: $MT_DATA_DIR, else ~/.cache/megatron-cpp/data).");
DEFINE_string(corpus_dir, "",
              "Corpus directory (default: $MT_CORPUS_DIR, else /usr/share/games/fortunes).");
DEFINE_int32(workers, 0, "Preprocessing threads; 0 = all cores.");
DEFINE_bool(force, false, "Rebuild even when the datasets are up to date.");

namespace mt::data {
namespace {

void Report(const std::string& prefix, bool built, const PreprocessStats& stats) {
  if (built) {
    std::printf("%s: built (%lld documents, %lld sequences, %lld tokens, %.2f s)\n", prefix.c_str(),
                static_cast<long long>(stats.documents), static_cast<long long>(stats.sequences),
                static_cast<long long>(stats.tokens), stats.seconds);
  } else {
    std::printf("%s: up to date\n", prefix.c_str());
  }
}

absl::Status Run() {
  DefaultDataConfig config;
  if (!FLAGS_output_dir.empty()) config.output_dir = FLAGS_output_dir;
  if (!FLAGS_corpus_dir.empty()) config.corpus_dir = FLAGS_corpus_dir;
  config.workers = FLAGS_workers;
  config.force = FLAGS_force;
  std::printf("make_default_data: corpus_dir=%s output_dir=%s workers=%d force=%d\n",
              config.corpus_dir.c_str(), config.output_dir.c_str(), config.workers, config.force);
  std::fflush(stdout);
  ASSIGN_OR_RETURN(DefaultData data, MakeDefaultData(config));
  Report(data.gpt2_prefix, data.gpt2_built, data.gpt2_stats);
  Report(data.bert_prefix, data.bert_built, data.bert_stats);
  return absl::OkStatus();
}

}  // namespace
}  // namespace mt::data

int main(int argc, char** argv) {
  return mt::ToolMain("make_default_data",
                      "[--output_dir=DIR] [--corpus_dir=DIR] [--workers=N] [--force]\n"
                      "Builds the fortunes corpus as GPT-2 and BERT indexed datasets.",
                      argc, argv, mt::data::Run);
}
