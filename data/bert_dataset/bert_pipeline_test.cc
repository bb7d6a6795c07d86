// The BERT data path end to end with the real vocabulary: text -> //data:preprocess's library
// (WordPiece, one sequence per sentence) -> BertDataset samples.
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "data/bert_dataset/bert_dataset.h"
#include "data/bert_dataset/bert_vocab.h"
#include "data/indexed/indexed_dataset.h"
#include "data/preprocessing/preprocess.h"
#include "data/tokenizers/wordpiece.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

TEST(BertPipelineTest, SamplesFromPreprocessedText) {
  const std::string dir = ::testing::TempDir() + "bert_pipeline";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    std::ofstream f(dir + "/corpus.txt");
    for (int d = 0; d < 40; ++d) {
      f << "The unaffable wizard cast spell number " << d << ". Nobody noticed anything unusual. "
        << "Then the lighthouse keeper's cat sneezed loudly! Was it magic? Perhaps.\n%\n";
    }
  }
  absl::StatusOr<std::unique_ptr<WordPiece>> wp = WordPiece::LoadDefault();
  ASSERT_TRUE(wp.ok()) << wp.status();
  PreprocessConfig pc;
  pc.inputs = {dir + "/corpus.txt"};
  pc.input_format = InputFormat::kText;
  pc.document_separator = "%";
  pc.output_prefix = dir + "/bert";
  pc.split_sentences = true;
  absl::StatusOr<PreprocessStats> stats = Preprocess(pc, **wp);
  ASSERT_TRUE(stats.ok()) << stats.status();
  EXPECT_EQ(stats->documents, 40);
  EXPECT_EQ(stats->sequences, 200);

  absl::StatusOr<std::unique_ptr<IndexedDataset>> opened = IndexedDataset::Open(pc.output_prefix);
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::shared_ptr<const IndexedDataset> data(std::move(*opened));
  absl::StatusOr<BertVocab> vocab = BertVocab::FromWordPiece(**wp);
  ASSERT_TRUE(vocab.ok()) << vocab.status();

  BertDatasetConfig config;
  config.split = "1";
  config.seq_len = 48;
  config.num_samples = 100;
  BertDatasetConfig off = config;
  off.masking.masked_lm_prob = 0;
  absl::StatusOr<std::unique_ptr<BertDataset>> masked =
      BertDataset::Create(data, Split::kTrain, config, *vocab);
  absl::StatusOr<std::unique_ptr<BertDataset>> plain =
      BertDataset::Create(data, Split::kTrain, off, *vocab);
  ASSERT_TRUE(masked.ok()) << masked.status();
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ((*masked)->num_samples(), (*plain)->num_samples());

  int64_t masked_tokens = 0, real_tokens = 0;
  for (int64_t i = 0; i < (*masked)->num_samples(); ++i) {
    const BertSample m = (*masked)->Sample(i);
    const BertSample p = (*plain)->Sample(i);
    // Masking comes last: putting the labels back gives the unmasked sample.
    std::vector<int32_t> restored = m.tokens;
    for (size_t k = 0; k < restored.size(); ++k) {
      if (m.labels[k] != kIgnoreLabel) restored[k] = m.labels[k];
    }
    ASSERT_EQ(restored, p.tokens) << "sample " << i;
    ASSERT_EQ(m.sop_label, p.sop_label);
    ASSERT_EQ(m.token_types, p.token_types);
    masked_tokens += std::count(m.loss_mask.begin(), m.loss_mask.end(), 1);
    real_tokens += m.num_tokens;
    // Whole words with the real vocabulary: a "##" piece is masked with the token before it.
    for (int k = 1; k < p.num_tokens; ++k) {
      const bool piece = absl::StartsWith((*wp)->token(p.tokens[k]), "##");
      if (piece) {
        ASSERT_EQ(m.loss_mask[k], m.loss_mask[k - 1]) << "sample " << i << " position " << k;
      }
    }
    // The unmasked sample reads as [CLS] sentences [SEP] sentences [SEP].
    absl::StatusOr<std::string> text =
        (*wp)->Decode(absl::MakeSpan(p.tokens.data(), static_cast<size_t>(p.num_tokens)));
    ASSERT_TRUE(text.ok());
    EXPECT_TRUE(absl::StartsWith(*text, "[CLS] ")) << *text;
    EXPECT_TRUE(absl::EndsWith(*text, " [SEP]")) << *text;
  }
  EXPECT_NEAR(static_cast<double>(masked_tokens) / real_tokens, 0.15, 0.02);
}

}  // namespace
}  // namespace data
}  // namespace mt
