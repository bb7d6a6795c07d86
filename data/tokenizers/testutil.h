// The installed tokenizers for tests (testonly): made once per process and kept, and a fixture
// that makes them first, so that a test whose tokenizer cannot be made (assets missing or
// corrupt) fails in its SetUp instead of crashing the binary.
//
//   class LambadaTest : public data::testing::TokenizerTest {};
//   TEST_F(LambadaTest, ...) { ... data::testing::Gpt2().Encode("text") ... }
#ifndef MT_DATA_TOKENIZERS_TESTUTIL_H_
#define MT_DATA_TOKENIZERS_TESTUTIL_H_

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace testing {

// The tokenizer CreateTokenizer(name) makes ("gpt2", "bert"), made on the first call and kept
// for the process; CreateTokenizer's error otherwise (tried again on the next call). Thread-safe.
absl::StatusOr<const Tokenizer*> TestTokenizer(absl::string_view name);

// SetUp makes the GPT-2 and the BERT tokenizer, failing the test when it cannot.
class TokenizerTest : public ::testing::Test {
 protected:
  void SetUp() override;
};

// The tokenizers a TokenizerTest made (CHECK-fails when called before one has: a misused helper).
const Tokenizer& Gpt2();
const Tokenizer& Bert();

}  // namespace testing
}  // namespace data
}  // namespace mt

#endif  // MT_DATA_TOKENIZERS_TESTUTIL_H_
