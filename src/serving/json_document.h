// Internal to kiln_serving_base: parsing a REST body with simdjson, after rewriting the
// NaN, Infinity and -Infinity tokens TF Serving accepts (RFC 8259 has none) into marker
// strings that the value readers (json_values.h) turn back into numbers.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "simdjson.h"

namespace kiln::serving::json_internal {

// Returns the body with non-finite tokens outside strings rewritten into marker strings, or an
// empty string when it has none.
std::string RewriteNonFinite(absl::string_view body);

// True when `s` is one of RewriteNonFinite's markers; *value is then NaN, Inf or -Inf.
bool NonFiniteMarker(std::string_view s, double* value);

// Parses `body` (rewriting non-finite tokens into `*rewritten` first, which must outlive the
// result) with a parser kept per thread, so that its buffers are reused across requests.
absl::StatusOr<simdjson::dom::element> ParseDocument(absl::string_view body,
                                                     std::string* rewritten);

}  // namespace kiln::serving::json_internal
