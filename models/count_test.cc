#include "models/count.h"

#include <cmath>
#include <map>

#include "gtest/gtest.h"
#include "models/registry.h"

namespace mt {
namespace models {
namespace {

// The paper's rounded sizes (its Tables 1 and 2).
TEST(CountTest, PaperModelSizesWithinTwoAndAHalfPercent) {
  const std::map<std::string, double> paper = {
      {"gpt2-355m", 355e6}, {"gpt2-1.2b", 1.2e9}, {"gpt2-2.5b", 2.5e9}, {"gpt2-4.2b", 4.2e9},
      {"gpt2-8.3b", 8.3e9}, {"bert-336m", 336e6}, {"bert-1.3b", 1.3e9}, {"bert-3.9b", 3.9e9}};
  for (const auto& [name, size] : paper) {
    auto m = FindModel(name);
    ASSERT_TRUE(m.ok()) << m.status();
    auto c = CountParameters(m->config, 1);
    ASSERT_TRUE(c.ok()) << name << ": " << c.status();
    EXPECT_LT(std::fabs(c->total - size) / size, 0.025) << name << ": " << c->total;
  }
}

// GPT-2 1.2B by hand: V_pad h + s h + L (12 h^2 + 13 h) + 2 h with V_pad = 50304 (128 x TP 1).
TEST(CountTest, Gpt2CountMatchesClosedForm) {
  auto m = FindModel("gpt2-1.2b");
  ASSERT_TRUE(m.ok());
  const int64_t h = 1536, L = 40, s = 1024;
  for (int tp : {1, 2, 4, 8}) {
    auto c = CountParameters(m->config, tp);
    ASSERT_TRUE(c.ok());
    const int64_t v = (50257 + 128 * tp - 1) / (128 * tp) * (128 * tp);
    EXPECT_EQ(c->padded_vocab, v);
    EXPECT_EQ(c->total, v * h + s * h + L * (12 * h * h + 13 * h) + 2 * h) << tp;
    // Per rank: vocab rows and the column/row-parallel weights and column biases split; positions,
    // LayerNorms and row-parallel biases replicated.
    EXPECT_EQ(c->per_rank, v / tp * h + s * h + L * ((12 * h * h + 7 * h) / tp + 6 * h) + 2 * h)
        << tp;
  }
}

TEST(CountTest, BadParallelDegreesAreRejected) {
  auto m = FindModel("gpt2-1.2b");  // 16 heads.
  ASSERT_TRUE(m.ok());
  auto c = CountParameters(m->config, 3);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(c.status().message().find("not divisible by tensor_model_parallel_size 3"),
            std::string::npos);
  EXPECT_EQ(FindModel("gpt2-9000b").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace models
}  // namespace mt
