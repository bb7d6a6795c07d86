// A small learnable synthetic corpus written as an indexed dataset, for training tests that must
// not depend on tokenizer assets: within a document, token t is followed by
// (multiplier * t + increment) mod vocab, except that one token in ten is drawn uniformly instead.
// Everything is drawn from one std::mt19937_64 seeded with `seed`, so a config always writes the
// same bytes. testonly.
#ifndef MT_DATA_TESTING_SYNTHETIC_CORPUS_H_
#define MT_DATA_TESTING_SYNTHETIC_CORPUS_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace mt {
namespace data {
namespace testing {

struct SyntheticCorpusConfig {
  int documents = 200;
  int vocab = 64;  // >= 2.
  uint64_t seed = 5;
  int min_length = 20;     // A document has min_length + (draw mod length_spread) tokens.
  int length_spread = 80;  // >= 1.
  int multiplier = 3;
  int increment = 1;
};

// Writes PREFIX.bin / PREFIX.idx. InvalidArgument for a bad config; the writer's errors.
absl::Status WriteSyntheticCorpus(const std::string& prefix, const SyntheticCorpusConfig& config);

}  // namespace testing
}  // namespace data
}  // namespace mt

#endif  // MT_DATA_TESTING_SYNTHETIC_CORPUS_H_
