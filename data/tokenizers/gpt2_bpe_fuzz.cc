// Fuzz target: the GPT-2 BPE tokenizer (installed assets) on arbitrary bytes, invalid UTF-8
// included. Encode must give ids in the vocabulary whose Decode is the input, byte for byte (the
// tokenizer is byte-level, so this holds for every byte string, valid UTF-8 or not); Decode of
// arbitrary ids (the input read as 16-bit values, some past the vocabulary) must give the tokens'
// bytes or InvalidArgument.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/fuzz_checks.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "glog/logging.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::Gpt2Bpe* bpe = [] {
    auto loaded = mt::data::Gpt2Bpe::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string decoded = mt::data::CheckEncodeDecode(*bpe, text);
  CHECK(decoded == text) << "decode(encode(x)) != x for x = '" << absl::CEscape(text) << "'";
  mt::data::CheckDecodeOfArbitraryIds(*bpe, text);
  return 0;
}
