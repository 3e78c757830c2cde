// Internal to kiln_serving_base: parsing a REST body with simdjson, after rewriting the
// NaN, Infinity and -Infinity tokens TF Serving accepts (RFC 8259 has none) into marker
// strings that the value readers (json_values.h) turn back into numbers.
#pragma once

#include <memory>
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

// What a parsed document points into; it must outlive the element ParseDocument returns.
struct DocumentStorage {
  std::string rewritten;  // the body with non-finite tokens rewritten, when it had any
  // The parser of a body too large for the per-thread parser (kMaxPerThreadParserBytes).
  std::unique_ptr<simdjson::dom::parser> large_parser;
};

// Bodies up to this size are parsed with a parser kept per thread, so that its buffers are
// reused across requests. A parser keeps the capacity of the largest document it parsed (about
// 9x the body for arrays of numbers), so after a 60 MB body each of the REST threads kept
// ~500 MB for good; larger bodies get a parser of their own, freed with the request.
inline constexpr size_t kMaxPerThreadParserBytes = size_t{4} << 20;

// Parses `body` (rewriting non-finite tokens into `storage->rewritten` first).
absl::StatusOr<simdjson::dom::element> ParseDocument(absl::string_view body,
                                                     DocumentStorage* storage);

}  // namespace kiln::serving::json_internal
