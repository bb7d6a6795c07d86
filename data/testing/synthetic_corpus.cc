#include "data/testing/synthetic_corpus.h"

#include <random>
#include <vector>

#include "core/status.h"
#include "data/indexed/indexed_dataset.h"

namespace mt {
namespace data {
namespace testing {

absl::Status WriteSyntheticCorpus(const std::string& prefix, const SyntheticCorpusConfig& c) {
  if (c.vocab < 2 || c.documents < 1 || c.min_length < 1 || c.length_spread < 1) {
    return absl::InvalidArgumentError(
        "synthetic corpus: need vocab >= 2, documents >= 1, min_length >= 1, length_spread >= 1");
  }
  ASSIGN_OR_RETURN(auto w, data::IndexedDatasetWriter::CreateForVocab(prefix, c.vocab));
  std::mt19937_64 rng(c.seed);
  for (int d = 0; d < c.documents; ++d) {
    std::vector<int32_t> doc;
    int t = static_cast<int>(rng() % c.vocab);
    const int len = c.min_length + static_cast<int>(rng() % c.length_spread);
    for (int i = 0; i < len; ++i) {
      doc.push_back(t);
      t = (rng() % 10 == 0) ? static_cast<int>(rng() % c.vocab)
                            : (c.multiplier * t + c.increment) % c.vocab;
    }
    RETURN_IF_ERROR(w->AddDocument(doc));
  }
  return w->Finalize();
}

}  // namespace testing
}  // namespace data
}  // namespace mt
