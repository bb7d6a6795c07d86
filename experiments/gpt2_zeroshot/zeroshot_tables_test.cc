#include "experiments/gpt2_zeroshot/zeroshot_tables.h"

#include "gtest/gtest.h"

namespace mt {
namespace experiments {
namespace {

TEST(ParseModelSizesTest, ParsesAndChecks) {
  auto s = ParseModelSizes("2x64x4,,4x128x8");
  ASSERT_TRUE(s.ok()) << s.status();
  ASSERT_EQ(s->size(), 2u);
  EXPECT_EQ((*s)[1].layers, 4);
  EXPECT_EQ((*s)[1].hidden, 128);
  EXPECT_EQ((*s)[1].heads, 8);
  EXPECT_EQ((*s)[0].Label(), "gpt2_2x64x4");
  for (const char* bad : {"", "2x64", "2x65x4", "0x64x4", "2x64x4x1", "axbxc"}) {
    EXPECT_EQ(ParseModelSizes(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

TEST(PaperZeroShotRowsTest, Table2) {
  const Table t = PaperZeroShotRows();
  EXPECT_EQ(t.ToCsv().substr(0, t.ToCsv().find('\n')), "model,params,dataset,metric,value");
  ASSERT_EQ(t.rows().size(), 8u);
  EXPECT_EQ(t.rows()[0], (std::vector<std::string>{"paper 355M", "355000000", "WikiText-103 test",
                                                   "adjusted_ppl", "19.31"}));
  EXPECT_EQ(t.rows()[5], (std::vector<std::string>{"paper 8.3B", "8300000000", "LAMBADA test",
                                                   "accuracy_pct", "66.51"}));
  EXPECT_EQ(t.rows()[7][1], "");
  EXPECT_EQ(t.rows()[7][4], "63.24");
}

}  // namespace
}  // namespace experiments
}  // namespace mt
