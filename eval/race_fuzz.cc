// Fuzz target: the RACE reader (ReadRaceFile) on an arbitrary file, then the article laid out as
// BERT rows (AppendRaceArticle, installed WordPiece vocabulary). A bad file must be a status; a
// good article must give 4 rows of seq_length tokens per question.
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "data/tokenizers/wordpiece.h"
#include "eval/race.h"
#include "glog/logging.h"
#include "tools/fuzz/fuzz_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const mt::data::WordPiece* wordpiece = [] {
    auto loaded = mt::data::WordPiece::LoadDefault();
    CHECK(loaded.ok()) << loaded.status();
    return loaded->release();
  }();
  const std::string path = mt::fuzz::WriteScratchFile(
      "1.txt", absl::string_view(reinterpret_cast<const char*>(data), size));
  auto article = mt::eval::ReadRaceFile(path);
  if (!article.ok()) return 0;
  mt::eval::RaceLayoutOptions options;
  options.seq_length = 64;
  options.max_qa_length = 16;
  mt::eval::RaceRows rows;
  const absl::Status status = mt::eval::AppendRaceArticle(*wordpiece, *article, options, &rows);
  CHECK(status.ok()) << status;
  CHECK_EQ(rows.tokens.size(), rows.labels.size() * 4 * 64);
  for (int32_t label : rows.labels) CHECK(label >= 0 && label < 4) << label;
  return 0;
}
