// Fuzz target: the BERT WordPiece tokenizer (installed vocabulary) on arbitrary bytes, invalid
// UTF-8 included. Encode must give ids in the vocabulary that Decode accepts; Decode of arbitrary
// ids (the input read as 16-bit values, some past the vocabulary) must succeed or be
// InvalidArgument. (WordPiece lower-cases, strips accents and splits punctuation, so the text is
// not recoverable: no round trip to check.)
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/wordpiece.h"
#include "glog/logging.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::WordPiece* wordpiece = [] {
    auto loaded = mt::data::WordPiece::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = wordpiece->Encode(text);
  for (int32_t id : ids) CHECK(id >= 0 && id < wordpiece->vocab_size()) << id;
  auto decoded = wordpiece->Decode(ids);
  CHECK(decoded.ok()) << decoded.status();

  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < size; i += 2) raw.push_back(data[i] | (data[i + 1] << 8));
  auto any = wordpiece->Decode(raw);
  bool in_range = true;
  for (int32_t id : raw) in_range = in_range && id < wordpiece->vocab_size();
  CHECK(in_range ? any.ok() : absl::IsInvalidArgument(any.status())) << any.status();
  return 0;
}
