// Writes a small learnable synthetic corpus as an indexed dataset (for training tests that must
// not depend on tokenizer assets): documents follow token -> (3 token + 1) mod V with 10% noise.
//   synthetic_corpus --output_prefix=PATH [--documents=N] [--vocab=V] [--seed=S]
#include <cstdio>
#include <random>
#include <vector>

#include "data/indexed/indexed_dataset.h"
#include "gflags/gflags.h"

DEFINE_string(output_prefix, "", "Output prefix (PREFIX.bin / PREFIX.idx).");
DEFINE_int32(documents, 200, "Documents.");
DEFINE_int32(vocab, 64, "Vocabulary size.");
DEFINE_uint64(seed, 5, "Seed.");

int main(int argc, char** argv) {
  gflags::ParseCommandLineFlags(&argc, &argv, true);
  if (FLAGS_output_prefix.empty() || FLAGS_vocab < 2 || FLAGS_documents < 1) {
    std::fprintf(stderr, "synthetic_corpus: error: need --output_prefix, --vocab >= 2, --documents >= 1\n");
    return 1;
  }
  auto w = mt::data::IndexedDatasetWriter::CreateForVocab(FLAGS_output_prefix, FLAGS_vocab);
  if (!w.ok()) {
    std::fprintf(stderr, "synthetic_corpus: error: %s\n", std::string(w.status().message()).c_str());
    return 1;
  }
  std::mt19937_64 rng(FLAGS_seed);
  for (int d = 0; d < FLAGS_documents; ++d) {
    std::vector<int32_t> doc;
    int t = static_cast<int>(rng() % FLAGS_vocab);
    const int len = 20 + static_cast<int>(rng() % 80);
    for (int i = 0; i < len; ++i) {
      doc.push_back(t);
      t = (rng() % 10 == 0) ? static_cast<int>(rng() % FLAGS_vocab) : (3 * t + 1) % FLAGS_vocab;
    }
    auto s = (*w)->AddDocument(doc);
    if (!s.ok()) {
      std::fprintf(stderr, "synthetic_corpus: error: %s\n", std::string(s.message()).c_str());
      return 1;
    }
  }
  auto s = (*w)->Finalize();
  if (!s.ok()) {
    std::fprintf(stderr, "synthetic_corpus: error: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  return 0;
}
