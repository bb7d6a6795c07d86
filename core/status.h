// Status helpers for code that returns absl::Status / absl::StatusOr (the installed Abseil,
// 20220623, does not ship these macros).
//
//   RETURN_IF_ERROR(DoThing());                 // returns the status if it is not OK
//   ASSIGN_OR_RETURN(Tensor t, MakeTensor());   // unwraps a StatusOr or returns its status
#ifndef MT_CORE_STATUS_H_
#define MT_CORE_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define MT_STATUS_CONCAT_INNER_(a, b) a##b
#define MT_STATUS_CONCAT_(a, b) MT_STATUS_CONCAT_INNER_(a, b)

#define RETURN_IF_ERROR(expr)                \
  do {                                       \
    ::absl::Status mt_status_ = (expr);      \
    if (!mt_status_.ok()) return mt_status_; \
  } while (0)

#define MT_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                              \
  if (!statusor.ok()) return statusor.status();        \
  lhs = std::move(statusor).value()

#define ASSIGN_OR_RETURN(lhs, expr) \
  MT_ASSIGN_OR_RETURN_IMPL_(MT_STATUS_CONCAT_(mt_statusor_, __LINE__), lhs, expr)

#endif  // MT_CORE_STATUS_H_
