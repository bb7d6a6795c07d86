// Writes a small learnable synthetic corpus as an indexed dataset (data/testing/synthetic_corpus.h)
// for the end-to-end training tests:
//   synthetic_corpus --output_prefix=PATH [--documents=N] [--vocab=V] [--seed=S]
#include <cstdio>
#include <string>

#include "data/testing/synthetic_corpus.h"
#include "gflags/gflags.h"

DEFINE_string(output_prefix, "", "Output prefix (PREFIX.bin / PREFIX.idx).");
DEFINE_int32(documents, 200, "Documents.");
DEFINE_int32(vocab, 64, "Vocabulary size.");
DEFINE_uint64(seed, 5, "Seed.");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_output_prefix.empty()) {
    std::fprintf(stderr, "synthetic_corpus: error: need --output_prefix\n");
    return 1;
  }
  mt::data::testing::SyntheticCorpusConfig c;
  c.documents = FLAGS_documents;
  c.vocab = FLAGS_vocab;
  c.seed = FLAGS_seed;
  const absl::Status s = mt::data::testing::WriteSyntheticCorpus(FLAGS_output_prefix, c);
  if (!s.ok()) {
    std::fprintf(stderr, "synthetic_corpus: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
