// Fuzz target: the LAMBADA reader (ReadLambadaTexts) on an arbitrary jsonl file, then every text
// split into context and target with GPT-2 in both modes. A bad file or text must be a status; a
// good example must have a non-empty context and target.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "eval/lambada.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::Gpt2Bpe* bpe = [] {
    auto loaded = mt::data::Gpt2Bpe::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  const std::string path = mt::fuzz::WriteScratchFile(
      "lambada.jsonl", absl::string_view(reinterpret_cast<const char*>(data), size));
  auto texts = mt::eval::ReadLambadaTexts(path);
  if (!texts.ok()) return 0;
  for (const std::string& text : *texts) {
    for (auto mode : {mt::eval::LambadaMode::kStrict, mt::eval::LambadaMode::kLastToken}) {
      auto example = mt::eval::MakeLambadaExample(*bpe, text, mode);
      if (!example.ok()) continue;
      CHECK(!example->context.empty() && !example->target.empty());
    }
  }
  return 0;
}
