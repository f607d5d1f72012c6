// Early-return helpers for absl::Status and absl::StatusOr.
#ifndef TENSORMORPH_CORE_UTIL_STATUS_MACROS_H_
#define TENSORMORPH_CORE_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define TM_CONCAT_INNER_(a, b) a##b
#define TM_CONCAT_(a, b) TM_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function when `expr` is not OK.
#define TM_RETURN_IF_ERROR(expr)             \
  do {                                       \
    ::absl::Status tm_status_ = (expr);      \
    if (!tm_status_.ok()) return tm_status_; \
  } while (0)

// `TM_ASSIGN_OR_RETURN(auto x, Foo());` binds the value or returns the error.
#define TM_ASSIGN_OR_RETURN(lhs, expr) \
  TM_ASSIGN_OR_RETURN_IMPL_(TM_CONCAT_(tm_statusor_, __LINE__), lhs, expr)
#define TM_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).status();  \
  lhs = *std::move(tmp)

#endif  // TENSORMORPH_CORE_UTIL_STATUS_MACROS_H_
