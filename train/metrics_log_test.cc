// The metrics log appends whole lines that survive reopening, names the file when it cannot be
// opened, and reports a write that fails (a full device) instead of dropping the line.
#include "train/metrics_log.h"

#include <cstdlib>
#include <fstream>
#include <string>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace mt {
namespace train {
namespace {

std::string TempPath(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  return std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
}

TEST(JsonlWriterTest, AppendsLinesAcrossReopens) {
  const std::string path = TempPath("metrics.jsonl");
  std::remove(path.c_str());
  {
    auto w = JsonlWriter::Open(path);
    ASSERT_TRUE(w.ok()) << w.status();
    ASSERT_TRUE((*w)->Write({{"iteration", 1}, {"lm_loss", 2.5}}).ok());
    // Flushed as written: readable while the writer is still open.
    std::ifstream in(path);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line, R"({"iteration":1,"lm_loss":2.5})");
  }
  auto w = JsonlWriter::Open(path);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->Write({{"iteration", 2}}).ok());
  std::ifstream in(path);
  std::string a, b, c;
  ASSERT_TRUE(std::getline(in, a));
  ASSERT_TRUE(std::getline(in, b));
  EXPECT_FALSE(std::getline(in, c));
  EXPECT_EQ(b, R"({"iteration":2})");
}

TEST(JsonlWriterTest, UnopenableFileIsNamed) {
  const std::string path = TempPath("no_such_dir/metrics.jsonl");
  auto w = JsonlWriter::Open(path);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(w.status().message().find(path), std::string::npos) << w.status();
}

TEST(JsonlWriterTest, FailedWriteIsDataLoss) {
  // /dev/full accepts the open and fails every write with ENOSPC.
  auto w = JsonlWriter::Open("/dev/full");
  if (!w.ok()) GTEST_SKIP() << "no /dev/full here: " << w.status();
  const absl::Status s = (*w)->Write({{"iteration", 1}});
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("/dev/full"), std::string::npos) << s;
  EXPECT_NE(s.message().find("No space left"), std::string::npos) << s;
}

}  // namespace
}  // namespace train
}  // namespace mt
