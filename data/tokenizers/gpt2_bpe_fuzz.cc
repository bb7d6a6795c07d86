// Fuzz target: the GPT-2 BPE tokenizer (installed assets) on arbitrary bytes, invalid UTF-8
// included. Encode must give ids in the vocabulary whose Decode is the input, byte for byte (the
// tokenizer is byte-level, so this holds for every byte string, valid UTF-8 or not); Decode of
// arbitrary ids (the input read as 16-bit values, some past the vocabulary) must give the tokens'
// bytes or InvalidArgument.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "glog/logging.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::Gpt2Bpe* bpe = [] {
    auto loaded = mt::data::Gpt2Bpe::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  const std::vector<int32_t> ids = bpe->Encode(text);
  for (int32_t id : ids) CHECK(id >= 0 && id < bpe->vocab_size()) << id;
  auto decoded = bpe->Decode(ids);
  CHECK(decoded.ok()) << decoded.status();
  CHECK(*decoded == text) << "decode(encode(x)) != x for x = '" << absl::CEscape(text) << "'";

  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < size; i += 2) raw.push_back(data[i] | (data[i + 1] << 8));
  auto any = bpe->Decode(raw);
  bool in_range = true;
  for (int32_t id : raw) in_range = in_range && id < bpe->vocab_size();
  CHECK(in_range ? any.ok() : absl::IsInvalidArgument(any.status())) << any.status();
  return 0;
}
