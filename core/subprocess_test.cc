#include "core/subprocess.h"

#include <cstdlib>

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
  // The child gets the caller's environment.
  setenv("MT_SUBPROCESS_TEST_VAR", "seen", 1);
  auto env = RunCommand({"sh", "-c", "echo $MT_SUBPROCESS_TEST_VAR"});
  ASSERT_TRUE(env.ok()) << env.status();
  EXPECT_EQ(*env, "seen\n");
  // A working directory that does not exist: the program does not run, and the error says where.
  auto nowhere = RunCommand({"pwd"}, "/no-such-dir-xyz");
  EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(nowhere.status().message().find("cannot run pwd in /no-such-dir-xyz"),
            absl::string_view::npos)
      << nowhere.status();
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
