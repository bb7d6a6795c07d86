// Checks the tokenizer fuzz targets (*_fuzz.cc here) share; each CHECK-fails (a fuzz finding) when
// the tokenizer breaks its contract (tokenizer.h).
#ifndef MT_DATA_TOKENIZERS_FUZZ_CHECKS_H_
#define MT_DATA_TOKENIZERS_FUZZ_CHECKS_H_

#include <string>

#include "absl/strings/string_view.h"
#include "data/tokenizers/tokenizer.h"

namespace mt::data {

// Encodes `text`, checks every id is in [0, vocab_size) and that Decode accepts them; returns
// the decoded text.
std::string CheckEncodeDecode(const Tokenizer& tokenizer, absl::string_view text);

// Decodes `bytes` read as little-endian 16-bit ids (some past the vocabulary): checks that Decode
// succeeds when every id is in the vocabulary and is InvalidArgument otherwise.
void CheckDecodeOfArbitraryIds(const Tokenizer& tokenizer, absl::string_view bytes);

}  // namespace mt::data

#endif  // MT_DATA_TOKENIZERS_FUZZ_CHECKS_H_
