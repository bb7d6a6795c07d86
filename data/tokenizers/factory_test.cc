#include "data/tokenizers/factory.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace mt::data {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FactoryTest, BuildsEachTokenizerByName) {
  EXPECT_THAT(TokenizerNames(), ElementsAre("gpt2", "bert"));
  for (const std::string& name : TokenizerNames()) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = CreateTokenizer(name);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ((*tok)->name(), name);
  }
  absl::StatusOr<std::unique_ptr<Tokenizer>> gpt2 = CreateTokenizer("gpt2");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_EQ((*gpt2)->vocab_size(), 50257);
  EXPECT_EQ((*gpt2)->eod_id(), 50256);
  EXPECT_THAT((*gpt2)->Encode("Hello world"), ElementsAre(15496, 995));
  absl::StatusOr<std::unique_ptr<Tokenizer>> bert = CreateTokenizer("bert");
  ASSERT_TRUE(bert.ok()) << bert.status();
  EXPECT_EQ((*bert)->vocab_size(), 30522);
  EXPECT_EQ((*bert)->special_tokens().cls, 101);
  EXPECT_THAT((*bert)->Encode("Hello world"), ElementsAre(7592, 2088));
  std::vector<int32_t> ids = {1};
  (*bert)->EncodeAppend("hello", &ids);
  EXPECT_THAT(ids, ElementsAre(1, 7592));
}

TEST(FactoryTest, UnknownNameIsInvalidArgument) {
  absl::Status s = CreateTokenizer("sentencepiece").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("gpt2, bert"));
}

TEST(FactoryTest, MissingAssetsAreNotFoundWithInstructions) {
  const char* old = std::getenv("MT_ASSETS_DIR");
  const std::string saved = old != nullptr ? old : "";
  ASSERT_EQ(setenv("MT_ASSETS_DIR", "/nonexistent/assets", /*overwrite=*/1), 0);
  for (const char* name : {"gpt2", "bert"}) {
    absl::Status s = CreateTokenizer(name).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << name;
    EXPECT_THAT(s.message(), HasSubstr("/nonexistent/assets/")) << name;
    EXPECT_THAT(s.message(), HasSubstr("tools/setup.sh")) << name;
  }
  if (old != nullptr) {
    setenv("MT_ASSETS_DIR", saved.c_str(), /*overwrite=*/1);
  } else {
    unsetenv("MT_ASSETS_DIR");
  }
}

}  // namespace
}  // namespace mt::data
