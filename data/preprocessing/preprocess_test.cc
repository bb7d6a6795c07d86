#include "data/preprocessing/preprocess.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
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

using Doc = std::vector<std::vector<int32_t>>;  // A document: its sequences.

using testing::Bert;
using testing::Gpt2;
using testing::ListDir;
using testing::ReadDocuments;
using testing::ReadFileBytes;

std::string TestDir(const std::string& name) { return testing::FreshTestDir("preprocess_" + name); }

// Writes `contents` to `path` and returns the path.
std::string WriteFile(const std::string& path, const std::string& contents) {
  testing::WriteFileBytes(path, contents);
  return path;
}

// Every test here uses the installed tokenizers.
class PreprocessTest : public testing::TokenizerTest {};

PreprocessStats MustPreprocess(const PreprocessConfig& config, const Tokenizer& tok) {
  absl::StatusOr<PreprocessStats> stats = Preprocess(config, tok);
  EXPECT_TRUE(stats.ok()) << stats.status();
  return stats.ok() ? *stats : PreprocessStats();
}

int64_t CountTokens(const std::vector<Doc>& docs) {
  int64_t n = 0;
  for (const Doc& d : docs) {
    for (const auto& s : d) n += static_cast<int64_t>(s.size());
  }
  return n;
}

TEST_F(PreprocessTest, Gpt2JsonlMatchesTheTokenizerExactly) {
  const std::string dir = TestDir("gpt2_jsonl");
  // Escapes, non-ASCII (\u00e9, a surrogate pair for an emoji), other keys in any order, an
  // empty text (skipped) and a blank line (ignored).
  const std::string jsonl =
      "{\"text\": \"Hello world.\\nSecond line.\", \"id\": 1}\n"
      "{\"meta\": {\"a\": [1, 2]}, \"text\": \"Caf\\u00e9 \\ud83d\\ude00 \\\"quoted\\\"\"}\n"
      "{\"text\": \"\"}\n"
      "\n"
      "{\"text\": \"  leading spaces and\\ttabs  \"}\n";
  const std::vector<std::string> texts = {"Hello world.\nSecond line.",
                                          "Caf\xC3\xA9 \xF0\x9F\x98\x80 \"quoted\"",
                                          "  leading spaces and\ttabs  "};
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/in.jsonl", jsonl)};
  config.output_prefix = dir + "/out";
  config.append_eod = true;
  const PreprocessStats stats = MustPreprocess(config, Gpt2());

  std::vector<Doc> want;
  for (const std::string& t : texts) {
    std::vector<int32_t> ids = Gpt2().Encode(t);
    ids.push_back(50256);
    want.push_back({ids});
  }
  const std::vector<Doc> got = ReadDocuments(config.output_prefix);
  EXPECT_EQ(got, want);
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.empty_documents, 1);
  EXPECT_EQ(stats.sequences, 3);
  EXPECT_EQ(stats.tokens, CountTokens(want));
  EXPECT_EQ(stats.bytes_in, static_cast<int64_t>(jsonl.size()));
  EXPECT_EQ(stats.bytes_out, static_cast<int64_t>(ReadFileBytes(dir + "/out.bin").size() +
                                                  ReadFileBytes(dir + "/out.idx").size()));
  EXPECT_EQ(stats.bytes_out, 2 * stats.tokens + 34 + 4 * 3 + 8 * 3 + 8 * 4);
  EXPECT_GT(stats.peak_rss_bytes, 0);
  EXPECT_GE(stats.workers, 1);

  // Without EOD the ids are exactly the tokenizer's.
  config.append_eod = false;
  MustPreprocess(config, Gpt2());
  for (auto& doc : want) doc[0].pop_back();
  EXPECT_EQ(ReadDocuments(config.output_prefix), want);
}

TEST_F(PreprocessTest, BertTextWithSentencesMatchesTheTokenizerExactly) {
  const std::string dir = TestDir("bert_text");
  const std::vector<std::string> texts = {
      "The quick brown fox. It jumped over Mr. Lazy Dog!\nWhy? Because.",
      "A single sentence without an end",
      "Unaffable naïve résumé. Second sentence here.\n\nNew paragraph"};
  std::string corpus = "%\n";
  for (const std::string& t : texts) corpus += t + "\n%\n";
  corpus += "\xE2\x80\x8B\n%\n";  // Only a zero-width space: no BERT tokens, skipped.
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/in.txt", corpus)};
  config.input_format = InputFormat::kText;
  config.document_separator = "%";
  config.output_prefix = dir + "/out";
  config.split_sentences = true;
  const PreprocessStats stats = MustPreprocess(config, Bert());

  std::vector<Doc> want;
  int64_t sequences = 0;
  for (const std::string& t : texts) {
    Doc doc;
    for (absl::string_view s : SplitSentences(t)) doc.push_back(Bert().Encode(s));
    sequences += static_cast<int64_t>(doc.size());
    want.push_back(doc);
  }
  ASSERT_EQ(want[0].size(), 4u);  // The splitter keeps "Mr. Lazy" together.
  ASSERT_EQ(want[1].size(), 1u);
  ASSERT_EQ(want[2].size(), 3u);
  EXPECT_EQ(ReadDocuments(config.output_prefix), want);
  EXPECT_EQ(stats.documents, 3);
  EXPECT_EQ(stats.empty_documents, 1);
  EXPECT_EQ(stats.sequences, sequences);
  EXPECT_EQ(stats.tokens, CountTokens(want));
  EXPECT_EQ(stats.bytes_in, static_cast<int64_t>(corpus.size()));
}

TEST_F(PreprocessTest, Gpt2SentencesGetEodOnTheLastOne) {
  const std::string dir = TestDir("gpt2_sentences");
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/in.jsonl", "{\"body\": \"One two. Three four! Five?\"}\n")};
  config.json_key = "body";
  config.output_prefix = dir + "/out";
  config.split_sentences = true;
  config.append_eod = true;
  MustPreprocess(config, Gpt2());
  std::vector<int32_t> last = Gpt2().Encode("Five?");
  last.push_back(50256);
  const std::vector<Doc> want = {{Gpt2().Encode("One two."), Gpt2().Encode("Three four!"), last}};
  EXPECT_EQ(ReadDocuments(config.output_prefix), want);
}

// A few hundred KB of varied text: words, punctuation, abbreviations, numbers, non-ASCII.
std::string SyntheticCorpus(int documents, uint32_t seed) {
  const std::vector<std::string> words = {"the",   "Quick",  "brown", "fox",     "Mr.",
                                          "Smith", "jumped", "over",  "3.14",    "naïve",
                                          "日本",  "😀",      "don't", "(yes)",   "\"Stop.\"",
                                          "e.g.",  "end.",   "What?", "Really!", "a\tb"};
  std::mt19937 rng(seed);
  std::string out;
  for (int d = 0; d < documents; ++d) {
    const int n = 1 + static_cast<int>(rng() % 120);
    for (int i = 0; i < n; ++i) {
      out += words[rng() % words.size()];
      out += (rng() % 17 == 0) ? "\n" : " ";
    }
    out += "\n%\n";
  }
  return out;
}

TEST_F(PreprocessTest, OutputDoesNotDependOnWorkersOrChunks) {
  const std::string dir = TestDir("workers");
  const std::string input = WriteFile(dir + "/in.txt", SyntheticCorpus(1500, 11));
  struct Variant {
    int workers;
    int64_t chunk_bytes;
    int max_in_flight;
  };
  const Variant variants[] = {
      {1, 1 << 20, 0}, {4, 1 << 20, 0}, {4, 3000, 0}, {4, 1, 1}, {2, 20000, 3}};
  for (const bool bert : {false, true}) {
    std::string first_bin, first_idx;
    for (const Variant& v : variants) {
      PreprocessConfig config;
      config.inputs = {input};
      config.input_format = InputFormat::kText;
      config.document_separator = "%";
      config.output_prefix = absl::StrCat(dir, "/out_", bert, "_", v.workers, "_", v.chunk_bytes);
      config.workers = v.workers;
      config.chunk_bytes = v.chunk_bytes;
      config.max_chunks_in_flight = v.max_in_flight;
      config.split_sentences = bert;
      config.append_eod = !bert;
      const PreprocessStats stats = MustPreprocess(config, bert ? Bert() : Gpt2());
      EXPECT_EQ(stats.documents, 1500);
      EXPECT_EQ(stats.workers, v.workers);
      const std::string bin = ReadFileBytes(config.output_prefix + ".bin");
      const std::string idx = ReadFileBytes(config.output_prefix + ".idx");
      if (first_bin.empty()) {
        first_bin = bin;
        first_idx = idx;
        // Spot-check against the tokenizer: the first document.
        const std::vector<Doc> docs = ReadDocuments(config.output_prefix);
        const std::string corpus = ReadFileBytes(input);
        const std::string doc0 = corpus.substr(0, corpus.find("\n%\n"));
        std::vector<int32_t> ids;
        for (const auto& s : docs[0]) ids.insert(ids.end(), s.begin(), s.end());
        std::vector<int32_t> want;
        if (bert) {
          for (absl::string_view s : SplitSentences(doc0)) Bert().EncodeAppend(s, &want);
        } else {
          want = Gpt2().Encode(doc0);
          want.push_back(50256);
        }
        EXPECT_EQ(ids, want);
      } else {
        EXPECT_TRUE(bin == first_bin) << "bert " << bert << " workers " << v.workers;
        EXPECT_TRUE(idx == first_idx) << "bert " << bert << " workers " << v.workers;
      }
    }
  }
}

TEST_F(PreprocessTest, ReportsProgress) {
  const std::string dir = TestDir("progress");
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/in.txt", SyntheticCorpus(300, 5))};
  config.input_format = InputFormat::kText;
  config.document_separator = "%";
  config.output_prefix = dir + "/out";
  config.chunk_bytes = 2000;
  config.progress_interval_s = 0;  // After every chunk.
  config.workers = 2;
  std::vector<PreprocessProgress> reports;
  absl::StatusOr<PreprocessStats> stats =
      Preprocess(config, Gpt2(), [&](const PreprocessProgress& p) { reports.push_back(p); });
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_GT(reports.size(), 10u);
  for (size_t i = 0; i < reports.size(); ++i) {
    EXPECT_EQ(reports[i].total_bytes, stats->bytes_in);
    if (i > 0) {
      EXPECT_GT(reports[i].documents, reports[i - 1].documents);
      EXPECT_GT(reports[i].bytes_in, reports[i - 1].bytes_in);
    }
  }
  EXPECT_EQ(reports.back().documents, 300);
  EXPECT_EQ(reports.back().bytes_in, stats->bytes_in);
}

TEST_F(PreprocessTest, FormatProgress) {
  PreprocessProgress p;
  p.documents = 1234;
  p.bytes_in = 12'300'000;
  p.total_bytes = 125'000'000;
  p.seconds = 2.0;
  EXPECT_EQ(FormatProgress(p), "1234 documents, 12.3 / 125.0 MB (9.8%), 6.2 MB/s, ETA 18 s");
  p.total_bytes = -1;
  EXPECT_EQ(FormatProgress(p), "1234 documents, 12.3 MB, 6.2 MB/s");
}

TEST_F(PreprocessTest, CreatesTheOutputDirectory) {
  const std::string dir = TestDir("mkdir");
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/in.jsonl", "{\"text\": \"hi\"}\n")};
  config.output_prefix = dir + "/a/b/out";
  MustPreprocess(config, Gpt2());
  EXPECT_EQ(ReadDocuments(config.output_prefix), (std::vector<Doc>{{Gpt2().Encode("hi")}}));
}

// Runs a failing configuration and checks the status and that nothing is left at the prefix.
void ExpectFailure(const PreprocessConfig& config, const Tokenizer& tok, absl::StatusCode code,
                   const std::string& message) {
  absl::StatusOr<PreprocessStats> stats = Preprocess(config, tok);
  ASSERT_FALSE(stats.ok());
  EXPECT_EQ(stats.status().code(), code) << stats.status();
  EXPECT_NE(stats.status().message().find(message), std::string::npos)
      << stats.status() << " lacks '" << message << "'";
  const std::filesystem::path prefix(config.output_prefix);
  if (std::filesystem::exists(prefix.parent_path())) {
    for (const std::string& name : ListDir(prefix.parent_path().string())) {
      EXPECT_NE(name.rfind(prefix.filename().string(), 0), 0u) << "left behind: " << name;
    }
  }
}

TEST_F(PreprocessTest, JsonErrorsNameFileAndLine) {
  const std::string dir = TestDir("json_errors");
  PreprocessConfig config;
  config.output_prefix = dir + "/out";
  config.inputs = {WriteFile(dir + "/bad.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n")};
  ExpectFailure(config, Gpt2(), absl::StatusCode::kInvalidArgument,
                dir + "/bad.jsonl:3: not valid JSON");
  config.inputs = {WriteFile(dir + "/key.jsonl", "{\"text\": \"a\"}\n{\"txt\": \"b\"}\n")};
  ExpectFailure(config, Gpt2(), absl::StatusCode::kInvalidArgument, "key.jsonl:2: no key 'text'");
  config.inputs = {WriteFile(dir + "/type.jsonl", "{\"text\": 5}\n")};
  ExpectFailure(config, Gpt2(), absl::StatusCode::kInvalidArgument,
                "type.jsonl:1: the value of 'text' is not a string");
  config.inputs = {WriteFile(dir + "/array.jsonl", "[\"text\"]\n")};
  ExpectFailure(config, Gpt2(), absl::StatusCode::kInvalidArgument,
                "array.jsonl:1: not a JSON object");
  config.inputs = {WriteFile(dir + "/utf8.jsonl", "{\"text\": \"\xff\"}\n")};
  ExpectFailure(config, Gpt2(), absl::StatusCode::kInvalidArgument, "utf8.jsonl:1: not valid JSON");
}

TEST_F(PreprocessTest, FirstErrorInInputOrderWins) {
  const std::string dir = TestDir("first_error");
  std::string jsonl;
  for (int i = 1; i <= 2000; ++i) {
    jsonl += (i == 1500 || i == 40) ? "{oops}\n" : absl::StrCat("{\"text\": \"doc ", i, "\"}\n");
  }
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/in.jsonl", jsonl)};
  config.output_prefix = dir + "/out";
  config.workers = 4;
  config.chunk_bytes = 100;
  ExpectFailure(config, Gpt2(), absl::StatusCode::kInvalidArgument, "in.jsonl:40: not valid JSON");
}

TEST_F(PreprocessTest, FailureLeavesAnOlderDatasetUntouched) {
  const std::string dir = TestDir("keep_old");
  PreprocessConfig config;
  config.inputs = {WriteFile(dir + "/good.jsonl", "{\"text\": \"good\"}\n")};
  config.output_prefix = dir + "/out";
  MustPreprocess(config, Gpt2());
  const std::string bin = ReadFileBytes(dir + "/out.bin");
  const std::string idx = ReadFileBytes(dir + "/out.idx");
  config.inputs = {WriteFile(dir + "/bad.jsonl", "{\"text\": \"new\"}\nnot json\n")};
  EXPECT_FALSE(Preprocess(config, Gpt2()).ok());
  EXPECT_EQ(ReadFileBytes(dir + "/out.bin"), bin);
  EXPECT_EQ(ReadFileBytes(dir + "/out.idx"), idx);
  EXPECT_EQ(ListDir(dir),
            (std::vector<std::string>{"bad.jsonl", "good.jsonl", "out.bin", "out.idx"}));
}

TEST_F(PreprocessTest, OtherErrors) {
  const std::string dir = TestDir("errors");
  const std::string input = WriteFile(dir + "/in.jsonl", "{\"text\": \"a\"}\n");
  PreprocessConfig config;
  config.inputs = {input, dir + "/missing.jsonl"};
  config.output_prefix = dir + "/out";
  ExpectFailure(config, Gpt2(), absl::StatusCode::kNotFound, dir + "/missing.jsonl");

  config.inputs = {input};
  config.append_eod = true;
  ExpectFailure(config, Bert(), absl::StatusCode::kInvalidArgument,
                "tokenizer 'bert' has no end-of-document token");
  config.append_eod = false;

  struct Bad {
    std::function<void(PreprocessConfig*)> mutate;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {[](PreprocessConfig* c) { c->inputs.clear(); }, "no input files"},
      {[](PreprocessConfig* c) { c->inputs.push_back(""); }, "an input path is empty"},
      {[](PreprocessConfig* c) { c->output_prefix.clear(); }, "output_prefix"},
      {[](PreprocessConfig* c) { c->json_key.clear(); }, "json_key"},
      {[](PreprocessConfig* c) { c->workers = -1; }, "workers"},
      {[](PreprocessConfig* c) { c->chunk_bytes = 0; }, "chunk_bytes"},
      {[](PreprocessConfig* c) { c->max_chunks_in_flight = -2; }, "max_chunks_in_flight"},
      {[](PreprocessConfig* c) { c->progress_interval_s = -1; }, "progress_interval_s"},
  };
  for (const Bad& b : bad) {
    PreprocessConfig c = config;
    b.mutate(&c);
    const absl::Status s = c.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.message;
    EXPECT_NE(s.message().find(b.message), std::string::npos) << s;
    if (!c.output_prefix.empty()) {
      ExpectFailure(c, Gpt2(), absl::StatusCode::kInvalidArgument, b.message);
    }
  }
  // An empty json_key is fine for text input.
  config.json_key.clear();
  config.input_format = InputFormat::kText;
  EXPECT_TRUE(config.Validate().ok());
}

}  // namespace
}  // namespace data
}  // namespace mt
