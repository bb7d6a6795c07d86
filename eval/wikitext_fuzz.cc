// Fuzz target: the WikiText-103 reader's text side on an arbitrary file: the whole-file read,
// Megatron's detokeniser (its regex-like delimiter rules over arbitrary, possibly invalid UTF-8)
// and the original-token count. Neither may crash; the count is at least one piece. Only rule 2
// (Megatron's re.sub of /' [0-9]/ by the literal /'[0-9]/) lengthens the text: 5 bytes become 8,
// so the result is at most 8/5 of the input (libFuzzer found an input that refuted the tighter
// bound this target first asserted; it is the seed crash_regex_growth).
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "eval/text_file.h"
#include "eval/wikitext.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = mt::fuzz::WriteScratchFile(
      "wiki.test.tokens", absl::string_view(reinterpret_cast<const char*>(data), size));
  auto raw = mt::eval::ReadTextFile(path);
  CHECK(raw.ok()) << raw.status();
  CHECK_EQ(raw->size(), size);
  const std::string text = mt::eval::DetokenizeWikiText(*raw);
  CHECK_LE(text.size(), raw->size() + 3 * (raw->size() / 5));
  CHECK_GE(mt::eval::CountOriginalTokens(*raw), 1);
  return 0;
}
