// Fuzz target: the vocabulary loaders on arbitrary files. Input: one mode byte, then
//   mode even: GPT-2's encoder.json, a NUL byte, vocab.bpe (Gpt2Bpe::Load with the installed
//              JavaScript class table);
//   mode odd:  BERT's vocab.txt (WordPiece::Load).
// A malformed vocabulary must be a status; a loaded one must tokenize a fixed text into ids in
// its vocabulary (and, for GPT-2, decode them back to the text).
#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/fuzz_checks.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "data/tokenizers/wordpiece.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

namespace {

constexpr absl::string_view kText =
    "Hello, world! It's 2024: na\xc3\xafve caf\xc3\xa9 \xe2\x80\x94 ok?";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const absl::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] % 2 == 1) {
    auto wordpiece = mt::data::WordPiece::Load(mt::fuzz::WriteScratchFile("vocab.txt", rest));
    if (wordpiece.ok()) mt::data::CheckEncodeDecode(**wordpiece, kText);
    return 0;
  }
  static const std::string js_classes = [] {
    auto path = mt::data::JsUnicodeClasses();
    CHECK(path.ok()) << path.status();
    return *path;
  }();
  const size_t nul = std::min(rest.find('\0'), rest.size());
  const std::string encoder = mt::fuzz::WriteScratchFile("encoder.json", rest.substr(0, nul));
  const std::string merges =
      mt::fuzz::WriteScratchFile("vocab.bpe", rest.substr(nul + (nul < rest.size())));
  auto bpe = mt::data::Gpt2Bpe::Load(encoder, merges, js_classes);
  if (!bpe.ok()) return 0;
  CHECK(mt::data::CheckEncodeDecode(**bpe, kText) == kText);
  return 0;
}
