// Status assertions for tests (the installed Abseil ships no status matchers). In a test body or
// any function returning void, a failed status fails the test with its message and returns,
// instead of crashing the binary:
//
//   ASSERT_OK(writer->Finalize());
//   ASSERT_OK_AND_ASSIGN(std::unique_ptr<IndexedDataset> ds, IndexedDataset::Open(prefix));
//   ASSERT_OK_AND_ASSIGN(ds, IndexedDataset::Open(other));   // Or into an existing variable.
//
// ASSERT_OK_AND_ASSIGN is several statements (like ASSIGN_OR_RETURN): brace it under an `if`. A
// helper that returns a value returns absl::StatusOr instead, and its callers use these. Where
// neither fits (a fixture's constructor), EXPECT_OK(expr) records a failed status with its message
// and goes on.
#ifndef MT_CORE_STATUS_TESTUTIL_H_
#define MT_CORE_STATUS_TESTUTIL_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/status.h"
#include "gtest/gtest.h"

#define ASSERT_OK(expr)                                                        \
  do {                                                                         \
    const ::absl::Status mt_assert_status_ = (expr);                           \
    ASSERT_TRUE(mt_assert_status_.ok()) << #expr << ": " << mt_assert_status_; \
  } while (0)

#define EXPECT_OK(expr)                                                        \
  do {                                                                         \
    const ::absl::Status mt_expect_status_ = (expr);                           \
    EXPECT_TRUE(mt_expect_status_.ok()) << #expr << ": " << mt_expect_status_; \
  } while (0)

#define MT_ASSERT_OK_AND_ASSIGN_IMPL_(statusor, lhs, expr)          \
  auto statusor = (expr);                                           \
  ASSERT_TRUE(statusor.ok()) << #expr << ": " << statusor.status(); \
  lhs = std::move(statusor).value()

#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  MT_ASSERT_OK_AND_ASSIGN_IMPL_(MT_STATUS_CONCAT_(mt_assert_statusor_, __LINE__), lhs, expr)

#endif  // MT_CORE_STATUS_TESTUTIL_H_
