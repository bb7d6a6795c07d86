#include "models/config.h"

#include "gtest/gtest.h"

namespace mt {
namespace models {
namespace {

TEST(ModelConfigTest, SizedIsTheFamilysDefaultsWithTheShape) {
  const ModelConfig bert = ModelConfig::Sized(Family::kBert, 3, 48, 6, 101, 20);
  EXPECT_EQ(bert.family, Family::kBert);
  EXPECT_EQ(bert.num_layers, 3);
  EXPECT_EQ(bert.hidden_size, 48);
  EXPECT_EQ(bert.num_attention_heads, 6);
  EXPECT_EQ(bert.vocab_size, 101);
  EXPECT_EQ(bert.max_position_embeddings, 20);
  EXPECT_EQ(bert.num_token_types, 2);  // BERT's segment embeddings, from ForFamily.
  const ModelConfig gpt = ModelConfig::Sized(Family::kGpt2, 2, 32, 4, 50, 16);
  EXPECT_EQ(gpt.num_token_types, ModelConfig().num_token_types);
  EXPECT_EQ(gpt.ffn(), 128);
  // Everything else is ForFamily's: the JSON forms differ only in the five sized fields.
  ModelConfig expect = ModelConfig::ForFamily(Family::kGpt2);
  expect.num_layers = 2;
  expect.hidden_size = 32;
  expect.num_attention_heads = 4;
  expect.vocab_size = 50;
  expect.max_position_embeddings = 16;
  EXPECT_EQ(gpt.ToJson(), expect.ToJson());
}

}  // namespace
}  // namespace models
}  // namespace mt
