// Fuzz target: the BERT WordPiece tokenizer (installed vocabulary) on arbitrary bytes, invalid
// UTF-8 included. Encode must give ids in the vocabulary that Decode accepts; Decode of arbitrary
// ids (the input read as 16-bit values, some past the vocabulary) must succeed or be
// InvalidArgument. (WordPiece lower-cases, strips accents and splits punctuation, so the text is
// not recoverable: no round trip to check.)
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "data/tokenizers/fuzz_checks.h"
#include "data/tokenizers/wordpiece.h"
#include "glog/logging.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::WordPiece* wordpiece = [] {
    auto loaded = mt::data::WordPiece::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  mt::data::CheckEncodeDecode(*wordpiece, text);
  mt::data::CheckDecodeOfArbitraryIds(*wordpiece, text);
  return 0;
}
