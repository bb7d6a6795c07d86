#include "data/indexed/dump.h"

#include <sys/stat.h>

#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace mt {
namespace data {
namespace {

TEST(DumpTest, PrintsHeaderAndOneDocumentPerLine) {
  const std::string dir = ::testing::TempDir() + "dump";
  ::mkdir(dir.c_str(), 0755);
  {
    absl::StatusOr<std::unique_ptr<IndexedDatasetWriter>> w =
        IndexedDatasetWriter::Create(dir + "/d", TokenDType::kU16);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->AddSequence(std::vector<int32_t>{15496, 11}).ok());
    ASSERT_TRUE((*w)->AddSequence(std::vector<int32_t>{995}).ok());
    ASSERT_TRUE((*w)->EndDocument().ok());
    ASSERT_TRUE((*w)->EndDocument().ok());
    ASSERT_TRUE((*w)->AddDocument(std::vector<int32_t>{50256}).ok());
    ASSERT_TRUE((*w)->Finalize().ok());
  }
  absl::StatusOr<std::unique_ptr<IndexedDataset>> ds = IndexedDataset::Open(dir + "/d");
  ASSERT_TRUE(ds.ok()) << ds.status();
  std::ostringstream out;
  WriteDump(**ds, out);
  EXPECT_EQ(out.str(),
            "dtype: u16\n"
            "sequences: 3\n"
            "documents: 3\n"
            "15496 11 995\n"
            "\n"
            "50256\n");
}

}  // namespace
}  // namespace data
}  // namespace mt
