#include "tools/fuzz/mutator.h"

#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace fuzz {
namespace {

TEST(RngTest, SplitMix64ReferenceValues) {
  // splitmix64 from state 0: the published first outputs of the generator.
  Rng rng(0);
  EXPECT_EQ(rng.Next(), 0xe220a8397b1dcdafull);
  EXPECT_EQ(rng.Next(), 0x6e789e6aa1b965f4ull);
  EXPECT_EQ(rng.Next(), 0x06c45d188009454full);
}

TEST(MutateTest, SameSeedSameInputs) {
  const std::vector<std::string> seeds = {"hello world", std::string("\0\1\2\3\4\5\6\7", 8), ""};
  Rng a(42), b(42);
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(Mutate(seeds, 64, &a), Mutate(seeds, 64, &b));
}

TEST(MutateTest, StaysWithinMaxSizeAndVaries) {
  const std::vector<std::string> seeds = {std::string(40, 'a'), "{\"text\": \"x\"}\n"};
  Rng rng(7);
  std::set<std::string> distinct;
  int changed = 0;
  for (int i = 0; i < 2000; ++i) {
    const std::string m = Mutate(seeds, 48, &rng);
    ASSERT_LE(m.size(), 48u);
    changed += m != seeds[0] && m != seeds[1];
    distinct.insert(m);
  }
  // Almost every mutation changes its seed (a flip can undo another, a splice can rebuild one).
  EXPECT_GT(changed, 1800);
  EXPECT_GT(distinct.size(), 1500u);
}

TEST(MutateTest, EmptySeedGrows) {
  Rng rng(1);
  size_t longest = 0;
  for (int i = 0; i < 200; ++i) longest = std::max(longest, Mutate({""}, 100, &rng).size());
  EXPECT_GT(longest, 0u);
}

}  // namespace
}  // namespace fuzz
}  // namespace mt
