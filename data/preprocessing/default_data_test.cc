#include "data/preprocessing/default_data.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "data/indexed/indexed_dataset.h"
#include "data/indexed/testutil.h"
#include "data/preprocessing/sentence_splitter.h"
#include "data/tokenizers/testutil.h"
#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

using Doc = std::vector<std::vector<int32_t>>;

using testing::ReadDocuments;

std::string TestDir(const std::string& name) {
  return testing::FreshTestDir("default_data_" + name);
}

int64_t MtimeNs(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
}

// The expected datasets of a list of fortunes (in corpus order).
std::vector<Doc> Gpt2Docs(const std::vector<std::string>& fortunes) {
  std::vector<Doc> docs;
  for (const std::string& f : fortunes) {
    std::vector<int32_t> ids = testing::Gpt2().Encode(f);
    ids.push_back(50256);
    docs.push_back({ids});
  }
  return docs;
}

std::vector<Doc> BertDocs(const std::vector<std::string>& fortunes) {
  std::vector<Doc> docs;
  for (const std::string& f : fortunes) {
    Doc doc;
    for (absl::string_view s : SplitSentences(f)) doc.push_back(testing::Bert().Encode(s));
    docs.push_back(doc);
  }
  return docs;
}

class DefaultDataTest : public testing::TokenizerTest {
 protected:
  void SetUp() override {
    TokenizerTest::SetUp();
    if (HasFatalFailure()) return;
    root_ = TestDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    corpus_ = root_ + "/corpus";
    std::filesystem::create_directories(corpus_ + "/subdir");
    // Two files in the fortune format (the second without a final "%"), and the strfile
    // indexes and a directory that must be ignored.
    testing::WriteFileBytes(corpus_ + "/b-file",
                            "Second file fortune.\n\tIndented line.  Another sentence!");
    testing::WriteFileBytes(
        corpus_ + "/a-file",
        "A day for firm decisions!!!!!  Or is it?\n%\nA long-forgotten loved one will "
        "appear soon.\n\nBuy the negatives at any price.\n%\n");
    testing::WriteFileBytes(corpus_ + "/a-file.dat", std::string("\0\0\0\2binary", 10));
    testing::WriteFileBytes(corpus_ + "/a-file.u8", "not a corpus file\n");
    testing::WriteFileBytes(corpus_ + "/subdir/x", "ignored\n");
    fortunes_ = {"A day for firm decisions!!!!!  Or is it?",
                 "A long-forgotten loved one will appear soon.\n\nBuy the negatives at any price.",
                 "Second file fortune.\n\tIndented line.  Another sentence!"};
    config_.corpus_dir = corpus_;
    config_.output_dir = root_ + "/out/data";  // Created by MakeDefaultData.
    config_.workers = 2;
    config_.shuffle_documents = false;  // Exact document order; shuffling has its own test.
  }

  DefaultData MustMake() {
    absl::StatusOr<DefaultData> data = MakeDefaultData(config_);
    EXPECT_TRUE(data.ok()) << data.status();
    return data.ok() ? *data : DefaultData();
  }

  std::string root_, corpus_;
  std::vector<std::string> fortunes_;
  DefaultDataConfig config_;
};

TEST_F(DefaultDataTest, ListsCorpusFiles) {
  absl::StatusOr<std::vector<std::string>> files = ListCorpusFiles(corpus_);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(*files, (std::vector<std::string>{corpus_ + "/a-file", corpus_ + "/b-file"}));
  EXPECT_EQ(ListCorpusFiles(root_ + "/none").status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(ListCorpusFiles(root_ + "/none").status().message().find("fortunes"),
            std::string::npos);
  std::filesystem::create_directories(root_ + "/empty");
  EXPECT_EQ(ListCorpusFiles(root_ + "/empty").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DefaultDataTest, BuildsBothDatasetsExactly) {
  const DefaultData data = MustMake();
  EXPECT_TRUE(data.gpt2_built);
  EXPECT_TRUE(data.bert_built);
  EXPECT_EQ(data.gpt2_prefix, config_.output_dir + "/fortunes_gpt2_text_document");
  EXPECT_EQ(data.bert_prefix, config_.output_dir + "/fortunes_bert_text_sentence");
  EXPECT_EQ(ReadDocuments(data.gpt2_prefix), Gpt2Docs(fortunes_));
  const std::vector<Doc> bert = BertDocs(fortunes_);
  ASSERT_EQ(bert[0].size(), 2u);  // "...!!!!!" | "Or is it?"
  ASSERT_EQ(bert[1].size(), 2u);  // Paragraph break.
  ASSERT_EQ(bert[2].size(), 3u);
  EXPECT_EQ(ReadDocuments(data.bert_prefix), bert);
  EXPECT_EQ(data.gpt2_stats.documents, 3);
  EXPECT_EQ(data.bert_stats.sequences, 7);
}

TEST_F(DefaultDataTest, ShufflesDocumentsDeterministically) {
  config_.shuffle_documents = true;
  const DefaultData data = MustMake();
  std::vector<Doc> shuffled = ReadDocuments(data.gpt2_prefix);
  std::vector<Doc> ordered = Gpt2Docs(fortunes_);
  EXPECT_FALSE(std::filesystem::exists(data.gpt2_prefix + ".ordered.bin"));
  // A permutation of the ordered documents...
  std::vector<Doc> a = shuffled, b = ordered;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  // ...identical when rebuilt with the same seed, different with another.
  config_.force = true;
  MustMake();
  EXPECT_EQ(ReadDocuments(data.gpt2_prefix), shuffled);
  std::vector<std::vector<Doc>> orders;
  for (uint64_t seed = 1; seed <= 6; ++seed) {
    config_.shuffle_seed = seed;
    MustMake();
    orders.push_back(ReadDocuments(data.gpt2_prefix));
  }
  std::sort(orders.begin(), orders.end());
  EXPECT_GT(std::unique(orders.begin(), orders.end()) - orders.begin(), 1);  // 3! = 6 orders.
}

TEST_F(DefaultDataTest, SkipsWorkWhenUpToDate) {
  DefaultData data = MustMake();
  const int64_t gpt2_mtime = MtimeNs(data.gpt2_prefix + ".bin");
  const int64_t bert_mtime = MtimeNs(data.bert_prefix + ".idx");
  data = MustMake();
  EXPECT_FALSE(data.gpt2_built);
  EXPECT_FALSE(data.bert_built);
  EXPECT_EQ(data.gpt2_stats.documents, 0);
  EXPECT_EQ(MtimeNs(data.gpt2_prefix + ".bin"), gpt2_mtime);
  EXPECT_EQ(MtimeNs(data.bert_prefix + ".idx"), bert_mtime);

  // A changed corpus file rebuilds both.
  testing::WriteFileBytes(corpus_ + "/b-file", "Changed.\n%\nNew fortune. Two sentences.\n");
  data = MustMake();
  EXPECT_TRUE(data.gpt2_built);
  EXPECT_TRUE(data.bert_built);
  const std::vector<std::string> changed = {fortunes_[0], fortunes_[1], "Changed.",
                                            "New fortune. Two sentences."};
  EXPECT_EQ(ReadDocuments(data.gpt2_prefix), Gpt2Docs(changed));
  EXPECT_EQ(ReadDocuments(data.bert_prefix), BertDocs(changed));

  // A new corpus file too.
  testing::WriteFileBytes(corpus_ + "/c-file", "Third file.\n");
  data = MustMake();
  EXPECT_TRUE(data.gpt2_built && data.bert_built);
  EXPECT_EQ(data.gpt2_stats.documents, 5);

  // A missing or resized output rebuilds only that dataset.
  std::filesystem::remove(data.gpt2_prefix + ".idx");
  data = MustMake();
  EXPECT_TRUE(data.gpt2_built);
  EXPECT_FALSE(data.bert_built);
  testing::WriteFileBytes(data.bert_prefix + ".bin", "xx");
  data = MustMake();
  EXPECT_FALSE(data.gpt2_built);
  EXPECT_TRUE(data.bert_built);
  EXPECT_EQ(data.bert_stats.documents, 5);

  // A damaged stamp, and force.
  testing::WriteFileBytes(data.gpt2_prefix + ".stamp", "garbage");
  data = MustMake();
  EXPECT_TRUE(data.gpt2_built);
  EXPECT_FALSE(data.bert_built);
  config_.force = true;
  data = MustMake();
  EXPECT_TRUE(data.gpt2_built && data.bert_built);
}

TEST_F(DefaultDataTest, MissingAssetsAndCorpus) {
  config_.corpus_dir = root_ + "/missing";
  absl::StatusOr<DefaultData> data = MakeDefaultData(config_);
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(data.status().message().find("tools/setup.sh"), std::string::npos);

  config_.corpus_dir = corpus_;
  const char* old = std::getenv("MT_ASSETS_DIR");
  const std::string saved = old != nullptr ? old : "";
  ::setenv("MT_ASSETS_DIR", (root_ + "/no_assets").c_str(), 1);
  data = MakeDefaultData(config_);
  if (old != nullptr) {
    ::setenv("MT_ASSETS_DIR", saved.c_str(), 1);
  } else {
    ::unsetenv("MT_ASSETS_DIR");
  }
  EXPECT_EQ(data.status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(std::filesystem::exists(config_.output_dir + "/fortunes_gpt2_text_document.bin"));
}

TEST(DefaultDataDirTest, Environment) {
  ::setenv("MT_DATA_DIR", "/some/dir", 1);
  ::setenv("MT_CORPUS_DIR", "/corpus", 1);
  EXPECT_EQ(DefaultDataDir(), "/some/dir");
  EXPECT_EQ(DefaultCorpusDir(), "/corpus");
  ::unsetenv("MT_DATA_DIR");
  ::unsetenv("MT_CORPUS_DIR");
  ::setenv("HOME", "/home/u", 1);
  EXPECT_EQ(DefaultDataDir(), "/home/u/.cache/megatron-cpp/data");
  EXPECT_EQ(DefaultCorpusDir(), "/usr/share/games/fortunes");
  ::unsetenv("HOME");
  EXPECT_EQ(DefaultDataDir(), "/tmp/megatron-cpp/data");
}

}  // namespace
}  // namespace data
}  // namespace mt
