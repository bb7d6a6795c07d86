#include "core/subprocess.h"

#include "gtest/gtest.h"

namespace mt {
namespace {

TEST(SubprocessTest, OutputAndExitStatus) {
  auto out = RunCommand({"sh", "-c", "echo hi; pwd"}, "/");
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "hi\n/\n");
  auto bad = RunCommand({"sh", "-c", "exit 3"});
  EXPECT_NE(bad.status().message().find("exited with status 3"), absl::string_view::npos);
  EXPECT_EQ(RunCommand({"no-such-program-xyz"}).status().code(), absl::StatusCode::kNotFound);
}

TEST(SubprocessTest, StandardErrorPassesThroughOrIsDiscarded) {
  const std::vector<std::string> both = {"sh", "-c", "echo out; echo err >&2"};
  testing::internal::CaptureStderr();
  auto passed = RunCommand(both);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "err\n");
  ASSERT_TRUE(passed.ok()) << passed.status();
  EXPECT_EQ(*passed, "out\n");
  testing::internal::CaptureStderr();
  auto discarded = RunCommand(both, "", Stderr::kDiscard);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(discarded.ok()) << discarded.status();
  EXPECT_EQ(*discarded, "out\n");
}

TEST(SubprocessTest, OutputLargerThanThePipe) {
  auto out = RunCommand({"sh", "-c", "head -c 300000 /dev/zero"});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->size(), 300000u);
}

TEST(SubprocessTest, FindsProgramsOnPath) {
  EXPECT_EQ(FindOnPath("sh").substr(FindOnPath("sh").size() - 3), "/sh");
  EXPECT_EQ(FindOnPath("no-such-program-xyz"), "");
  EXPECT_EQ(FindOnPath("/bin/sh"), "/bin/sh");
}

}  // namespace
}  // namespace mt
