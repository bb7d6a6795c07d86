#include "experiments/gpt2_zeroshot/bigram.h"

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(BigramTest, PredictsTheMostFrequentFollowerByHand) {
  // After "the": LORD x3 (once as "LORD," whose punctuation is stripped), house x1.
  const BigramBaseline b = BigramBaseline::Build(
      {"and the LORD said", "unto the LORD, and the house", "the LORD. the ark"});
  EXPECT_EQ(b.Predict("the"), "LORD");
  EXPECT_EQ(b.Predict("unto"), "the");
  // Context as written: "LORD," is its own context, followed by "and".
  EXPECT_EQ(b.Predict("LORD,"), "and");
  // Unseen context: the most frequent word overall ("LORD" 3, "the" 4 -> "the").
  EXPECT_EQ(b.Predict("never"), "the");
  // Only "said" follows "LORD" as written.
  EXPECT_EQ(b.Predict("LORD"), "said");
  EXPECT_EQ(b.CountCorrect({"so he went unto the LORD", "so he went unto the ark", "LORD"}), 1);
  // Per line, in order (a one-word line is wrong).
  EXPECT_EQ(b.CorrectPerLine({"unto the ark", "LORD", "went unto the LORD", "the LORD said"}),
            (std::vector<bool>{false, false, true, true}));
}

}  // namespace
}  // namespace experiments
}  // namespace mt
