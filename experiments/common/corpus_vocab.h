// A small WordPiece vocabulary built from a corpus's own words, and the corpus tokenised with it:
// what lets a model of width 32-64 learn more than the unigram distribution in minutes, when
// bert-base-uncased's 30,522-token output layer costs more than the whole layer stack.
//
//   ASSIGN_OR_RETURN(CorpusVocabDataset d, BuildCorpusVocabDataset(prose, 2000));
//   // d.vocab_file: .../prose/vocab_2000w.txt; d.bert_prefix: its sentence-level dataset
//
// The vocabulary: [PAD] [UNK] [CLS] [SEP] [MASK]; every character of the corpus's basic words
// (BERT's basic tokenisation: lower-cased, accents stripped, punctuation split off) both as a
// word start and as a "##" continuation, so that every word can be spelled; then the most
// frequent whole words. Greedy longest-match WordPiece (data/tokenizers/wordpiece.h) then keeps
// each frequent word as one token and spells the rest.
#ifndef MT_EXPERIMENTS_COMMON_CORPUS_VOCAB_H_
#define MT_EXPERIMENTS_COMMON_CORPUS_VOCAB_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizers/wordpiece.h"
#include "experiments/common/prose_corpus.h"

namespace mt {
namespace experiments {

// The vocabulary of `texts` (above), ids in order: the five special tokens, the characters (in
// byte order) each followed by its "##" form, then up to `max_words` words of two or more
// characters by falling count (ties in byte order). `basic` supplies the basic tokenisation.
std::vector<std::string> CorpusVocab(const std::vector<std::string>& texts,
                                     const data::WordPiece& basic, int max_words);

struct CorpusVocabDataset {
  std::string vocab_file;   // One token per line, line i holding id i.
  std::string bert_prefix;  // The training documents, sentence-split, tokenised with it.
  int32_t vocab_size = 0;
};

// Writes CorpusVocab(the training documents of `corpus`, max_words) next to its BERT dataset and
// tokenises its training text with it (unless a stamp shows both are there for this text).
// InvalidArgument when max_words < 1; Preprocess's errors.
absl::StatusOr<CorpusVocabDataset> BuildCorpusVocabDataset(const ProseCorpus& corpus,
                                                           int max_words);

}  // namespace experiments
}  // namespace mt

#endif  // MT_EXPERIMENTS_COMMON_CORPUS_VOCAB_H_
