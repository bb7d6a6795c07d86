#include "models/config.h"

#include <string>

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

TEST(ModelConfigTest, QueryGroups) {
  ModelConfig c = ModelConfig::Sized(Family::kGpt2, 2, 64, 8, 50, 16);
  EXPECT_EQ(c.query_groups(), 8);  // Without grouped-query attention: one K/V head per head.
  // Off, the JSON has no query-group keys (checkpoints of GPT-2 read as before).
  EXPECT_EQ(c.ToJson().find("query"), std::string::npos);
  c.group_query_attention = true;
  c.num_query_groups = 2;
  EXPECT_EQ(c.query_groups(), 2);
  EXPECT_TRUE(c.ValidateParallel(2).ok());
  // The groups round-trip through the JSON stored in checkpoints.
  auto back = ModelConfig::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->group_query_attention);
  EXPECT_EQ(back->num_query_groups, 2);
  EXPECT_EQ(back->ToJson(), c.ToJson());
  // TP must split whole groups; the groups must divide the heads.
  const absl::Status tp = c.ValidateParallel(4);
  EXPECT_EQ(tp.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tp.message(),
            "num_query_groups 2 is not divisible by tensor_model_parallel_size 4; each "
            "tensor-parallel rank holds whole key/value groups");
  c.num_query_groups = 3;
  EXPECT_EQ(c.Validate().message(),
            "num_query_groups 3 does not divide num_attention_heads 8; grouped-query attention "
            "needs a divisor of the heads (1: multi-query)");
  c.num_query_groups = 0;
  EXPECT_EQ(c.Validate().code(), absl::StatusCode::kInvalidArgument);
}

// The untied output layer and the rotary base (Llama's tie_word_embeddings, rope_theta): absent
// from the JSON at their defaults, round-tripped otherwise, and checked.
TEST(ModelConfigTest, UntiedOutputAndRotaryBase) {
  ModelConfig c = ModelConfig::Sized(Family::kGpt2, 2, 64, 8, 50, 16);
  EXPECT_EQ(c.ToJson().find("untie"), std::string::npos);
  EXPECT_EQ(c.ToJson().find("rotary"), std::string::npos);
  c.untie_embeddings_and_output_weights = true;
  c.rotary_base = 500000.0;
  auto back = ModelConfig::FromJson(c.ToJson());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(back->untie_embeddings_and_output_weights);
  EXPECT_EQ(back->rotary_base, 500000.0);
  c.rotary_base = -1;
  EXPECT_EQ(c.Validate().message(), "rotary_base must be finite and > 0, got -1");
  ModelConfig bert = ModelConfig::Sized(Family::kBert, 2, 64, 8, 50, 16);
  bert.untie_embeddings_and_output_weights = true;
  EXPECT_EQ(bert.Validate().message(),
            "untie_embeddings_and_output_weights: BERT's output layer is tied to the word "
            "embedding");
}

}  // namespace
}  // namespace models
}  // namespace mt
