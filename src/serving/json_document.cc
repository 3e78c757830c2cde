#include "serving/json_document.h"

#include <limits>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace kiln::serving::json_internal {
namespace {

// simdjson follows RFC 8259, which has no NaN or Infinity; TF Serving's reader accepts them.
// Such tokens (outside strings) are rewritten into strings carrying a marker byte that a JSON
// string cannot contain unescaped, and the number readers below turn them back into values.
constexpr char kNanMarker[] = "\x01NaN";
constexpr char kInfMarker[] = "\x01Inf";
constexpr char kNegInfMarker[] = "\x01-Inf";

size_t MatchNonFinite(absl::string_view text, size_t pos, const char** marker) {
  const absl::string_view rest = text.substr(pos);
  const bool negative = absl::StartsWith(rest, "-");
  const absl::string_view word = rest.substr(negative ? 1 : 0);
  size_t length = 0;
  if (absl::StartsWith(word, "NaN")) {
    *marker = "\\u0001NaN";
    length = 3;
  } else if (absl::StartsWith(word, "Infinity")) {
    length = 8;
  } else if (absl::StartsWith(word, "Inf")) {
    length = 3;
  } else {
    return 0;
  }
  if (length == 8 || (length == 3 && word[0] == 'I')) {
    *marker = negative ? "\\u0001-Inf" : "\\u0001Inf";
  }
  return length + (negative ? 1 : 0);
}

}  // namespace

std::string RewriteNonFinite(absl::string_view body) {
  std::string out;
  bool in_string = false;
  size_t copied = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      continue;
    }
    if (c != 'N' && c != 'I' && c != '-') continue;
    const char* marker = nullptr;
    const size_t length = MatchNonFinite(body, i, &marker);
    if (length == 0) continue;
    out.append(body.data() + copied, i - copied);
    absl::StrAppend(&out, "\"", marker, "\"");
    i += length - 1;
    copied = i + 1;
  }
  if (copied == 0) return "";
  out.append(body.data() + copied, body.size() - copied);
  return out;
}

bool NonFiniteMarker(std::string_view s, double* value) {
  if (s.empty() || s[0] != '\x01') return false;
  if (s == kNanMarker) {
    *value = std::numeric_limits<double>::quiet_NaN();
  } else if (s == kInfMarker) {
    *value = std::numeric_limits<double>::infinity();
  } else if (s == kNegInfMarker) {
    *value = -std::numeric_limits<double>::infinity();
  } else {
    return false;
  }
  return true;
}

absl::StatusOr<simdjson::dom::element> ParseDocument(absl::string_view body,
                                                     DocumentStorage* storage) {
  thread_local simdjson::dom::parser per_thread_parser;
  storage->rewritten = RewriteNonFinite(body);
  const absl::string_view text =
      storage->rewritten.empty() ? body : absl::string_view(storage->rewritten);
  simdjson::dom::parser* parser = &per_thread_parser;
  if (text.size() > kMaxPerThreadParserBytes) {
    storage->large_parser = std::make_unique<simdjson::dom::parser>();
    parser = storage->large_parser.get();
  }
  simdjson::dom::element doc;
  auto error = parser->parse(text.data(), text.size()).get(doc);
  if (error != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON Parse error: ", simdjson::error_message(error)));
  }
  return doc;
}

}  // namespace kiln::serving::json_internal
