// :explain over a loaded version: Vertex AI's request and response around SampledShapley.
#include <simdjson.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/json_tensor.h"

namespace kiln::serving {
namespace {

// What ExplanationMetadata says about one input or output (only the fields Kiln uses).
struct InputSpec {
  std::vector<float> baseline;  // flattened inputBaselines[0]; empty: zeros
  std::string group;            // groupName: the whole input is one feature of this group
};
struct OutputSpec {
  std::string name;
  std::vector<std::string> display_names;  // indexDisplayNameMapping
};
struct ExplainSpec {
  std::map<std::string, InputSpec> inputs;
  std::optional<OutputSpec> output;
  int path_count = 10;
};

absl::Status FlattenNumbers(simdjson::dom::element e, const std::string& what,
                            std::vector<float>* out) {
  if (e.is_array()) {
    simdjson::dom::array children = e.get_array().value_unsafe();
    for (simdjson::dom::element child : children) {
      KILN_RETURN_IF_ERROR(FlattenNumbers(child, what, out));
    }
    return absl::OkStatus();
  }
  double value;
  if (e.get_double().get(value) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expects numbers"));
  }
  out->push_back(static_cast<float>(value));
  return absl::OkStatus();
}

// Reads an ExplanationMetadata object ({"inputs": {...}, "outputs": {...}}) into `spec`;
// what it names replaces what `spec` had.
absl::Status ReadMetadata(simdjson::dom::element metadata, const std::string& where,
                          ExplainSpec* spec) {
  simdjson::dom::object inputs, outputs;
  if (metadata["inputs"].get_object().get(inputs) == simdjson::SUCCESS) {
    for (auto [key, value] : inputs) {
      InputSpec input;
      simdjson::dom::array baselines;
      if (value["inputBaselines"].get_array().get(baselines) == simdjson::SUCCESS &&
          baselines.size() > 0) {
        // Vertex allows several baselines and averages over them; Kiln uses the first.
        KILN_RETURN_IF_ERROR(FlattenNumbers(
            baselines.at(0).value_unsafe(),
            absl::StrCat(where, " inputs.", std::string(key), ".inputBaselines"), &input.baseline));
      }
      std::string_view group;
      if (value["groupName"].get_string().get(group) == simdjson::SUCCESS) input.group = group;
      spec->inputs[std::string(key)] = std::move(input);
    }
  }
  if (metadata["outputs"].get_object().get(outputs) == simdjson::SUCCESS) {
    for (auto [key, value] : outputs) {
      OutputSpec output{std::string(key), {}};
      simdjson::dom::array names;
      if (value["indexDisplayNameMapping"].get_array().get(names) == simdjson::SUCCESS) {
        for (simdjson::dom::element n : names) {
          std::string_view s;
          output.display_names.emplace_back(n.get_string().get(s) == simdjson::SUCCESS ? s : "");
        }
      }
      spec->output = std::move(output);
      break;  // one explained output, as Vertex allows
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<ExplainSpec> ReadSpec(const ServableVersion& servable, absl::string_view body) {
  ExplainSpec spec;
  simdjson::dom::parser parser;
  const std::string& dir = servable.model().assets_extra_dir();
  if (!dir.empty()) {
    const std::filesystem::path path = std::filesystem::path(dir) / "explanation_metadata.json";
    std::error_code error;
    if (std::filesystem::exists(path, error)) {
      std::ifstream file(path);
      std::stringstream text;
      text << file.rdbuf();
      simdjson::dom::parser file_parser;
      simdjson::dom::element metadata;
      if (file_parser.parse(text.str()).get(metadata) != simdjson::SUCCESS) {
        return absl::FailedPreconditionError(absl::StrCat(path.string(), ": not valid JSON"));
      }
      KILN_RETURN_IF_ERROR(ReadMetadata(metadata, path.string(), &spec));
    }
  }
  simdjson::dom::element root, override_spec, metadata;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("JSON Parse error: the request body is not valid JSON");
  }
  if (root["explanationSpecOverride"].get(override_spec) != simdjson::SUCCESS) return spec;
  int64_t path_count;
  auto shapley = override_spec["parameters"]["sampledShapleyAttribution"];
  if (shapley.error() == simdjson::SUCCESS) {
    if (shapley["pathCount"].get_int64().get(path_count) != simdjson::SUCCESS || path_count < 1 ||
        path_count > 50) {
      return absl::InvalidArgumentError(
          "explanationSpecOverride.parameters.sampledShapleyAttribution.pathCount must be an "
          "integer in [1, 50]");
    }
    spec.path_count = static_cast<int>(path_count);
  } else if (override_spec["parameters"].error() == simdjson::SUCCESS) {
    return absl::InvalidArgumentError(
        "explanationSpecOverride.parameters: Kiln explains with sampledShapleyAttribution only");
  }
  if (override_spec["metadata"].get(metadata) == simdjson::SUCCESS) {
    KILN_RETURN_IF_ERROR(ReadMetadata(metadata, "explanationSpecOverride.metadata", &spec));
  }
  return spec;
}

}  // namespace

absl::StatusOr<std::string> ExplainJson(const ServableVersion& servable, absl::string_view body,
                                        const ExplainLimits& limits) {
  const runtime::Model& model = servable.model();
  KILN_ASSIGN_OR_RETURN(PredictJsonRequest request,
                        ParsePredictRequest(body, [&](absl::string_view name) {
                          return FindServingSignature(model, name);
                        }));
  KILN_ASSIGN_OR_RETURN(ExplainSpec spec, ReadSpec(servable, body));
  // The predictions, which also say which class each instance is explained for.
  KILN_ASSIGN_OR_RETURN(PredictResult predicted,
                        RunPredict(servable, request.signature_name, request.inputs, {}));
  const runtime::SignatureInfo& signature = *predicted.signature;

  // Features: every element of every input, in the signature's input order, unless the
  // metadata groups an input.
  int64_t num_instances = -1;
  FeatureLayout layout;
  std::vector<int64_t> row_sizes;
  std::map<std::string, int> group_feature;
  std::vector<std::string> feature_group_name;  // "" for element features
  for (const std::string& key : signature.input_keys) {
    const Tensor& t = request.inputs.at(key);
    if (t.dtype() != DType::kFloat32) {
      return absl::InvalidArgumentError(absl::StrCat("input '", key, "' has dtype ",
                                                     DTypeName(t.dtype()),
                                                     "; :explain attributes float inputs only"));
    }
    if (t.rank() < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", key, "': :explain needs a batch dimension"));
    }
    if (num_instances >= 0 && t.dim(0) != num_instances) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", key, "' has ", t.dim(0), " instances; other inputs have ", num_instances));
    }
    num_instances = t.dim(0);
    const int64_t size = num_instances > 0 ? t.num_elements() / num_instances : 0;
    row_sizes.push_back(size);
    auto it = spec.inputs.find(key);
    const std::string group = it == spec.inputs.end() ? "" : it->second.group;
    for (int64_t e = 0; e < size; ++e) {
      if (!group.empty()) {
        auto [g, added] = group_feature.emplace(group, layout.num_features);
        if (added) {
          ++layout.num_features;
          feature_group_name.push_back(group);
        }
        layout.feature_of_element.push_back(g->second);
      } else {
        layout.feature_of_element.push_back(layout.num_features++);
        feature_group_name.push_back("");
      }
    }
  }
  if (num_instances <= 0) return absl::InvalidArgumentError(":explain needs at least one instance");
  const int64_t row_size = static_cast<int64_t>(layout.feature_of_element.size());

  std::vector<float> instances(static_cast<size_t>(num_instances * row_size));
  std::vector<float> baseline(static_cast<size_t>(row_size), 0.0f);
  int64_t offset = 0;
  for (size_t k = 0; k < signature.input_keys.size(); ++k) {
    const std::string& key = signature.input_keys[k];
    const float* data = request.inputs.at(key).data<float>();
    for (int64_t n = 0; n < num_instances; ++n) {
      std::copy(data + n * row_sizes[k], data + (n + 1) * row_sizes[k],
                instances.begin() + n * row_size + offset);
    }
    auto it = spec.inputs.find(key);
    if (it != spec.inputs.end() && !it->second.baseline.empty()) {
      const std::vector<float>& b = it->second.baseline;
      if (b.size() != 1 && static_cast<int64_t>(b.size()) != row_sizes[k]) {
        return absl::InvalidArgumentError(absl::StrCat("inputBaselines of '", key, "' has ",
                                                       b.size(), " values; expected 1 or ",
                                                       row_sizes[k], " (one instance)"));
      }
      for (int64_t e = 0; e < row_sizes[k]; ++e) baseline[offset + e] = b[b.size() == 1 ? 0 : e];
    }
    offset += row_sizes[k];
  }

  // The explained output and, for class scores, each instance's top class.
  const std::string output_name = spec.output ? spec.output->name : signature.output_keys.at(0);
  auto out_it = predicted.outputs.find(output_name);
  if (out_it == predicted.outputs.end()) {
    return absl::InvalidArgumentError(absl::StrCat("explanation metadata names output '",
                                                   output_name, "', which the signature lacks"));
  }
  if (out_it->second.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("output '", output_name, "' has dtype ",
                                                   DTypeName(out_it->second.dtype()),
                                                   "; :explain explains float outputs"));
  }
  const int64_t out_size = out_it->second.num_elements() / num_instances;
  std::vector<int64_t> class_index(num_instances, 0);
  for (int64_t n = 0; n < num_instances && out_size > 1; ++n) {
    const float* row = out_it->second.data<float>() + n * out_size;
    class_index[n] = std::max_element(row, row + out_size) - row;
  }

  const int64_t per_instance = ShapleyEvaluationsPerInstance(layout.num_features, spec.path_count);
  ScalarBatchFn evaluate = [&](absl::Span<const float> rows,
                               int64_t num_rows) -> absl::StatusOr<std::vector<double>> {
    std::vector<double> values(num_rows);
    for (int64_t begin = 0; begin < num_rows; begin += limits.batch_rows) {
      const int64_t count = std::min(limits.batch_rows, num_rows - begin);
      std::map<std::string, Tensor> inputs;
      int64_t col = 0;
      for (size_t k = 0; k < signature.input_keys.size(); ++k) {
        const Tensor& sent = request.inputs.at(signature.input_keys[k]);
        std::vector<int64_t> dims(sent.shape().dims().begin(), sent.shape().dims().end());
        dims[0] = count;
        KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(DType::kFloat32, Shape(dims)));
        float* dst = t.data<float>();
        for (int64_t r = 0; r < count; ++r) {
          const float* src = rows.data() + (begin + r) * row_size + col;
          std::copy(src, src + row_sizes[k], dst + r * row_sizes[k]);
        }
        col += row_sizes[k];
        inputs.emplace(signature.input_keys[k], std::move(t));
      }
      KILN_ASSIGN_OR_RETURN(auto outputs, servable.Run(signature.key, std::move(inputs)));
      auto it = outputs.find(output_name);
      if (it == outputs.end() || it->second.num_elements() != count * out_size) {
        return absl::InternalError(
            absl::StrCat("explain: output '", output_name, "' missing or of the wrong size"));
      }
      const float* out = it->second.data<float>();
      for (int64_t r = 0; r < count; ++r) {
        values[begin + r] = out[r * out_size + class_index[(begin + r) / per_instance]];
      }
    }
    return values;
  };
  KILN_ASSIGN_OR_RETURN(std::vector<ShapleyAttribution> attributions,
                        SampledShapley(instances, baseline, layout,
                                       {.path_count = spec.path_count,
                                        .seed = limits.seed,
                                        .max_evaluations = limits.max_evaluations},
                                       evaluate));

  std::string out = "{\"explanations\": [";
  for (int64_t n = 0; n < num_instances; ++n) {
    const ShapleyAttribution& a = attributions[n];
    if (n) out.append(", ");
    out.append("{\"attributions\": [{\"baselineOutputValue\": ");
    AppendDoubleJson(a.baseline_output, &out);
    out.append(", \"instanceOutputValue\": ");
    AppendDoubleJson(a.instance_output, &out);
    out.append(", \"featureAttributions\": {");
    int64_t col = 0;
    bool first = true;
    for (size_t k = 0; k < signature.input_keys.size(); ++k) {
      const std::string& key = signature.input_keys[k];
      const Tensor& sent = request.inputs.at(key);
      if (row_sizes[k] > 0 && !feature_group_name[layout.feature_of_element[col]].empty()) {
        col += row_sizes[k];
        continue;  // written once, under its group's name, below
      }
      std::vector<int64_t> dims(sent.shape().dims().begin() + 1, sent.shape().dims().end());
      Tensor t(DType::kFloat32, Shape(dims));
      for (int64_t e = 0; e < row_sizes[k]; ++e) {
        t.data<float>()[e] = static_cast<float>(a.attributions[layout.feature_of_element[col + e]]);
      }
      col += row_sizes[k];
      if (!first) out.append(", ");
      first = false;
      AppendJsonString(key, &out);
      out.append(": ");
      AppendTensorJson(t, false, &out);
    }
    for (const auto& [group, feature] : group_feature) {
      if (!first) out.append(", ");
      first = false;
      AppendJsonString(group, &out);
      out.append(": ");
      AppendDoubleJson(a.attributions[feature], &out);
    }
    out.append("}, \"outputIndex\": [");
    if (out_size > 1) out.append(std::to_string(class_index[n]));
    out.append("]");
    if (spec.output && class_index[n] < static_cast<int64_t>(spec.output->display_names.size())) {
      out.append(", \"outputDisplayName\": ");
      AppendJsonString(spec.output->display_names[class_index[n]], &out);
    }
    out.append(", \"approximationError\": ");
    AppendDoubleJson(a.approximation_error, &out);
    out.append(", \"outputName\": ");
    AppendJsonString(output_name, &out);
    out.append("}]}");
  }
  out.append("], ");
  KILN_ASSIGN_OR_RETURN(
      std::string predictions,
      WritePredictResponse(predicted.outputs, predicted.output_order, JsonFormat::kRow));
  // {"predictions": ...} without its opening brace continues this object.
  out.append(predictions, predictions.find('{') + 1, std::string::npos);
  return out;
}

}  // namespace kiln::serving
