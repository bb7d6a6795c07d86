#include "experiments/common/corpus_vocab.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/file_system.h"
#include "core/status.h"
#include "data/preprocessing/preprocess.h"
#include "experiments/common/report.h"

namespace mt {
namespace experiments {
namespace {

// The UTF-8 sequences of `word` (well-formed: BasicTokenize's output), one per code point.
std::vector<std::string> Characters(const std::string& word) {
  std::vector<std::string> out;
  for (size_t i = 0; i < word.size();) {
    const unsigned char c = static_cast<unsigned char>(word[i]);
    const size_t len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    out.push_back(word.substr(i, len));
    i += len;
  }
  return out;
}

// FNV-1a, 64 bits, of `s`: the stamp's digest.
uint64_t Digest(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::vector<std::string> CorpusVocab(const std::vector<std::string>& texts,
                                     const data::WordPiece& basic, int max_words) {
  absl::flat_hash_map<std::string, int64_t> counts;
  std::set<std::string> chars;
  for (const std::string& text : texts) {
    for (std::string& w : basic.BasicTokenize(text)) {
      for (std::string& ch : Characters(w)) chars.insert(std::move(ch));
      ++counts[w];
    }
  }
  std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const std::string& ch : chars) {
    vocab.push_back(ch);
    vocab.push_back("##" + ch);
  }
  std::vector<std::pair<int64_t, std::string>> words;
  for (auto& [w, n] : counts) {
    if (Characters(w).size() >= 2) words.push_back({-n, w});
  }
  std::sort(words.begin(), words.end());
  if (static_cast<int64_t>(words.size()) > max_words) words.resize(max_words);
  for (auto& [n, w] : words) vocab.push_back(std::move(w));
  return vocab;
}

absl::StatusOr<CorpusVocabDataset> BuildCorpusVocabDataset(const ProseCorpus& corpus,
                                                           int max_words) {
  if (max_words < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("corpus vocabulary of ", max_words, " words: must be at least 1"));
  }
  const std::string dir = std::filesystem::path(corpus.bert_prefix).parent_path().string();
  CorpusVocabDataset d;
  d.vocab_file = absl::StrCat(dir, "/vocab_", max_words, "w.txt");
  d.bert_prefix = absl::StrCat(dir, "/prose_vocab", max_words, "w_text_sentence");
  std::vector<std::string> texts;
  for (const ProseDocument& doc : corpus.train) texts.push_back(doc.text);
  ASSIGN_OR_RETURN(auto basic, data::WordPiece::LoadDefault());
  const std::vector<std::string> vocab = CorpusVocab(texts, *basic, max_words);
  d.vocab_size = static_cast<int32_t>(vocab.size());
  const std::string vocab_text = absl::StrCat(absl::StrJoin(vocab, "\n"), "\n");
  const std::string jsonl = dir + "/prose_train.jsonl";
  ASSIGN_OR_RETURN(std::string train_text, DefaultFileSystem().ReadFile(jsonl));
  const std::string stamp =
      absl::StrCat("corpus vocab v1 ", Digest(vocab_text), " ", Digest(train_text), "\n");
  auto old = DefaultFileSystem().ReadFile(d.bert_prefix + ".stamp");
  if (old.ok() && *old == stamp && std::filesystem::exists(d.bert_prefix + ".bin") &&
      std::filesystem::exists(d.bert_prefix + ".idx")) {
    return d;
  }
  RETURN_IF_ERROR(WriteFile(d.vocab_file, vocab_text));
  ASSIGN_OR_RETURN(auto tokenizer, data::WordPiece::Load(d.vocab_file));
  std::printf("prose corpus: tokenising %s with its own %d-token vocabulary\n", jsonl.c_str(),
              d.vocab_size);
  std::fflush(stdout);
  data::PreprocessConfig p;
  p.inputs = {jsonl};
  p.output_prefix = d.bert_prefix;
  p.split_sentences = true;
  RETURN_IF_ERROR(data::Preprocess(p, *tokenizer).status());
  RETURN_IF_ERROR(WriteFile(d.bert_prefix + ".stamp", stamp));
  return d;
}

}  // namespace experiments
}  // namespace mt
