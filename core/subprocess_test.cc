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

TEST(SubprocessTest, FindsProgramsOnPath) {
  EXPECT_EQ(FindOnPath("sh").substr(FindOnPath("sh").size() - 3), "/sh");
  EXPECT_EQ(FindOnPath("no-such-program-xyz"), "");
  EXPECT_EQ(FindOnPath("/bin/sh"), "/bin/sh");
}

}  // namespace
}  // namespace mt
