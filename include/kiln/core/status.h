// Status helpers. Errors are absl::Status values; these macros keep call sites short.
#pragma once

#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

#define KILN_STATUS_CONCAT_INNER(a, b) a##b
#define KILN_STATUS_CONCAT(a, b) KILN_STATUS_CONCAT_INNER(a, b)

// Returns from the current function if `expr` (an absl::Status) is not OK.
#define KILN_RETURN_IF_ERROR(expr)                     \
  do {                                                 \
    ::absl::Status kiln_status_ = (expr);              \
    if (!kiln_status_.ok()) return kiln_status_;       \
  } while (0)

// KILN_ASSIGN_OR_RETURN(auto x, MakeX()); assigns the value or returns the error.
#define KILN_ASSIGN_OR_RETURN(lhs, expr) \
  KILN_ASSIGN_OR_RETURN_IMPL(KILN_STATUS_CONCAT(kiln_statusor_, __LINE__), lhs, expr)
#define KILN_ASSIGN_OR_RETURN_IMPL(statusor, lhs, expr) \
  auto statusor = (expr);                               \
  if (!statusor.ok()) return std::move(statusor).status(); \
  lhs = std::move(statusor).value()

namespace kiln {

// Returns `status` with `context` put in front of its message ("context: message"), keeping
// the code. Used to add the file, node or input name as an error travels up.
absl::Status Annotate(const absl::Status& status, absl::string_view context);

}  // namespace kiln
