// Fuzz target: IndexedDataset::Open on an arbitrary .idx/.bin pair, then every sequence and
// document read back. Input: a 2-byte little-endian length L, then L bytes of .idx (fewer if the
// input is shorter), then the .bin. Open must either fail with a status or give a dataset whose
// every view lies inside the .bin and agrees with the index.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "data/indexed/indexed_dataset.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t idx_bytes =
      size < 2 ? 0 : std::min<size_t>(size - 2, data[0] | (static_cast<size_t>(data[1]) << 8));
  const absl::string_view rest = input.substr(std::min<size_t>(size, 2));
  mt::fuzz::WriteScratchFile("d.idx", rest.substr(0, idx_bytes));
  mt::fuzz::WriteScratchFile("d.bin", rest.substr(idx_bytes));

  auto dataset = mt::data::IndexedDataset::Open(mt::fuzz::ScratchDir() + "/d");
  if (!dataset.ok()) return 0;
  const mt::data::IndexedDataset& d = **dataset;
  const int64_t item = mt::data::TokenDTypeSize(d.dtype());
  int64_t tokens = 0;
  for (int64_t i = 0; i < d.num_sequences(); ++i) {
    const mt::data::TokenView seq = d.sequence(i);
    CHECK_EQ(seq.size(), d.sequence_length(i));
    CHECK_EQ(d.sequence_pointer(i), tokens * item);
    if (seq.size() > 0) (void)seq[seq.size() - 1];
    tokens += seq.size();
  }
  CHECK_EQ(tokens, d.num_tokens());
  int64_t doc_tokens = 0;
  for (int64_t doc = 0; doc < d.num_documents(); ++doc) {
    const mt::data::TokenView view = d.document(doc);
    CHECK_EQ(view.size(), d.document_length(doc));
    doc_tokens += view.size();
  }
  CHECK_EQ(doc_tokens, d.num_tokens());
  return 0;
}
