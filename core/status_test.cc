#include "core/status.h"

#include <memory>

#include "core/status_testutil.h"
#include "gtest/gtest-spi.h"
#include "gtest/gtest.h"

namespace mt {
namespace {

absl::StatusOr<int> Half(int x) {
  if (x % 2 != 0) return absl::InvalidArgumentError("odd");
  return x / 2;
}

absl::Status Check(int x) {
  if (x < 0) return absl::OutOfRangeError("negative");
  return absl::OkStatus();
}

absl::StatusOr<int> Quarter(int x) {
  RETURN_IF_ERROR(Check(x));
  ASSIGN_OR_RETURN(int h, Half(x));
  ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, MacrosPropagateErrorsAndValues) {
  EXPECT_EQ(*Quarter(12), 3);
  EXPECT_EQ(Quarter(6).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Quarter(-4).status().code(), absl::StatusCode::kOutOfRange);
}

// What the test assertions saw: each function stops at its first failed assertion.
int g_reached = 0;

void AssignsFromAnError() {
  g_reached = 1;
  ASSERT_OK_AND_ASSIGN(const int q, Quarter(6));
  g_reached = q;
}

void AssertsAnError() {
  g_reached = 1;
  ASSERT_OK(Check(-1));
  g_reached = 2;
}

TEST(StatusTest, TestMacrosFailTheTestAndReturnOnAnError) {
  EXPECT_FATAL_FAILURE(AssignsFromAnError(), "Quarter(6): INVALID_ARGUMENT: odd");
  EXPECT_EQ(g_reached, 1);
  EXPECT_FATAL_FAILURE(AssertsAnError(), "Check(-1): OUT_OF_RANGE: negative");
  EXPECT_EQ(g_reached, 1);
}

TEST(StatusTest, TestMacrosAssignTheValue) {
  ASSERT_OK(Check(3));
  ASSERT_OK_AND_ASSIGN(const int q, Quarter(20));
  EXPECT_EQ(q, 5);
  std::unique_ptr<int> p;  // Move-only values, into an existing variable.
  ASSERT_OK_AND_ASSIGN(p, absl::StatusOr<std::unique_ptr<int>>(std::make_unique<int>(7)));
  EXPECT_EQ(*p, 7);
}

}  // namespace
}  // namespace mt
