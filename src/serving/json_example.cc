// tf.Example as JSON (the "examples" and "context" of :classify and :regress bodies,
// json_tensor.h).
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/serving/json_tensor.h"
#include "serving/json_document.h"
#include "serving/json_values.h"
#include "simdjson.h"

namespace kiln::serving {
namespace {

using json_internal::DecodeB64;
using json_internal::ElementText;
using json_internal::IsB64Object;
using json_internal::NonFiniteMarker;
using json_internal::ParseDocument;
using json_internal::ReadSignatureName;
using json_internal::ReadNumber;
using simdjson::dom::element;
using simdjson::dom::element_type;

// One feature value list: all ints -> int64_list, any float -> float_list, strings or b64 ->
// bytes_list.
absl::Status AddFeature(absl::string_view name, const element& value,
                        tensorflow::Feature* feature) {
  std::vector<element> values;
  if (value.type() == element_type::ARRAY) {
    simdjson::dom::array range3 = value.get_array().value_unsafe();
    for (element e : range3) values.push_back(e);
  } else {
    values.push_back(value);
  }
  bool any_string = false, any_float = false, any_int = false;
  for (const element& e : values) {
    double unused;
    switch (e.type()) {
      case element_type::INT64:
      case element_type::UINT64:
        any_int = true;
        break;
      case element_type::DOUBLE:
        any_float = true;
        break;
      case element_type::STRING:
        if (NonFiniteMarker(e.get_string().value_unsafe(), &unused)) {
          any_float = true;
        } else {
          any_string = true;
        }
        break;
      case element_type::OBJECT:
        if (IsB64Object(e)) {
          any_string = true;
          break;
        }
        [[fallthrough]];
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("feature '", name, "': unsupported value ", ElementText(e),
                         " (features are numbers, strings, {\"b64\": ...} or flat lists of them)"));
    }
  }
  if (any_string && (any_float || any_int)) {
    return absl::InvalidArgumentError(
        absl::StrCat("feature '", name, "' mixes strings and numbers in one list"));
  }
  if (any_string) {
    auto* list = feature->mutable_bytes_list();
    for (const element& e : values) {
      if (e.type() == element_type::STRING) {
        std::string_view s = e.get_string().value_unsafe();
        list->add_value(std::string(s));
      } else {
        KILN_ASSIGN_OR_RETURN(std::string decoded, DecodeB64(e, name));
        list->add_value(std::move(decoded));
      }
    }
  } else if (any_float) {
    auto* list = feature->mutable_float_list();
    for (const element& e : values) {
      double number;
      bool integral, is_uint;
      int64_t as_int;
      uint64_t as_uint;
      ReadNumber(e, &number, &integral, &as_int, &as_uint, &is_uint);
      list->add_value(static_cast<float>(number));
    }
  } else if (any_int) {
    auto* list = feature->mutable_int64_list();
    for (const element& e : values) {
      if (e.type() == element_type::UINT64) {
        return absl::InvalidArgumentError(
            absl::StrCat("feature '", name, "': value ", ElementText(e), " exceeds int64"));
      }
      list->add_value(e.get_int64().value_unsafe());
    }
  }
  return absl::OkStatus();
}

absl::Status ParseExample(const element& e, absl::string_view what, tensorflow::Example* example) {
  if (e.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError(absl::StrCat(what, " must be a JSON object of features"));
  }
  auto* features = example->mutable_features()->mutable_feature();
  simdjson::dom::object range4 = e.get_object().value_unsafe();
  for (auto field : range4) {
    const absl::string_view name(field.key.data(), field.key.size());
    if (features->count(std::string(name))) continue;  // a duplicate: the first counts
    KILN_RETURN_IF_ERROR(AddFeature(name, field.value, &(*features)[std::string(name)]));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ExamplesJsonRequest> ParseExamplesRequest(absl::string_view body) {
  json_internal::DocumentStorage storage;
  KILN_ASSIGN_OR_RETURN(element doc, ParseDocument(body, &storage));
  if (doc.type() != element_type::OBJECT) {
    return absl::InvalidArgumentError("Malformed request: the body must be a JSON object");
  }
  ExamplesJsonRequest request;
  bool has_examples = false, has_signature_name = false;
  simdjson::dom::object range5 = doc.get_object().value_unsafe();
  // Of duplicated keys the first counts, as in TF Serving.
  for (auto field : range5) {
    if (field.key == "signature_name") {
      if (std::exchange(has_signature_name, true)) continue;
      KILN_RETURN_IF_ERROR(ReadSignatureName(field.value, &request.signature_name));
    } else if (field.key == "context" && !request.has_context) {
      request.has_context = true;
      KILN_RETURN_IF_ERROR(ParseExample(field.value, "'context'", &request.context));
    } else if (field.key == "examples" && !has_examples) {
      has_examples = true;
      if (field.value.type() != element_type::ARRAY) {
        return absl::InvalidArgumentError("'examples' must be a list of JSON objects");
      }
      simdjson::dom::array range6 = field.value.get_array().value_unsafe();
      for (element e : range6) {
        KILN_RETURN_IF_ERROR(ParseExample(e, absl::StrCat("example ", request.examples.size()),
                                          &request.examples.emplace_back()));
      }
    }
  }
  if (!has_examples) return absl::InvalidArgumentError("Missing 'examples' key");
  return request;
}

}  // namespace kiln::serving
