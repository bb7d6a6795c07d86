// Fuzz target: the preprocessing pipeline's input side (InputReader's chunking of jsonl and text
// input, the JSON line parser, the sentence splitter) on arbitrary files, tokenised with GPT-2 and
// written as a dataset. Input: one option byte, then the input file's bytes. Option bits:
//   0: jsonl (0) or text (1);  1: split sentences;  2-3: chunk_bytes 1, 7, 64 or 1 MiB;
//   4: text documents separated by a blank line (0) or by a "<doc>" line (1).
// A bad input must be a status naming the file, never a crash; a good one must give a dataset
// that opens and agrees with the returned counts.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "data/indexed/indexed_dataset.h"
#include "data/preprocessing/preprocess.h"
#include "data/tokenizers/gpt2_bpe.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::Gpt2Bpe* bpe = [] {
    auto loaded = mt::data::Gpt2Bpe::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  if (size == 0) return 0;
  const uint8_t options = data[0];
  mt::data::PreprocessConfig config;
  config.inputs = {mt::fuzz::WriteScratchFile(
      "input", absl::string_view(reinterpret_cast<const char*>(data) + 1, size - 1))};
  config.input_format = options & 1 ? mt::data::InputFormat::kText : mt::data::InputFormat::kJsonl;
  config.split_sentences = options & 2;
  constexpr int64_t kChunkBytes[] = {1, 7, 64, 1 << 20};
  config.chunk_bytes = kChunkBytes[(options >> 2) & 3];
  config.document_separator = options & 16 ? "<doc>" : "";
  config.append_eod = true;
  config.workers = 1;
  config.output_prefix = mt::fuzz::ScratchDir() + "/out";
  auto stats = mt::data::Preprocess(config, *bpe);
  if (!stats.ok()) return 0;
  auto dataset = mt::data::IndexedDataset::Open(config.output_prefix);
  CHECK(dataset.ok()) << dataset.status();
  CHECK_EQ((*dataset)->num_documents(), stats->documents);
  CHECK_EQ((*dataset)->num_sequences(), stats->sequences);
  CHECK_EQ((*dataset)->num_tokens(), stats->tokens);
  return 0;
}
