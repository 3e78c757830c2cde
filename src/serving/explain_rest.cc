// :explain over a loaded version: Vertex AI's request and response around SampledShapley.
//
// Two kinds of signature are explained:
//  - tensor inputs: every element of every float input is a feature (unless the metadata
//    groups an input), attributions come back in the input's shape;
//  - tf.Example models (one string input of serialized tf.Examples, as TFX, Estimator and
//    classify/regress signatures take): each named feature of the Example is one feature,
//    attributions come back by feature name. Instances are TF Serving's classify/regress
//    "examples" objects, or "instances" of serialized Examples ({"b64": ...}).
// Both are reduced to the same problem (rows of floats per instance and baseline, and an
// evaluator that turns a batch of rows into one model call), so SampledShapley, the
// baselines' average and the response's bookkeeping are shared.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/json_tensor.h"
#include "kiln/serving/tensor_proto.h"
#include "serving/explain_internal.h"

namespace kiln::serving {
namespace explain_internal {

static absl::Status FlattenValues(simdjson::dom::element e, const std::string& what,
                                  BaselineValue* out) {
  if (e.is_array()) {
    simdjson::dom::array children = e.get_array().value_unsafe();
    for (simdjson::dom::element child : children) {
      KILN_RETURN_IF_ERROR(FlattenValues(child, what, out));
    }
    return absl::OkStatus();
  }
  double value;
  std::string_view text;
  if (e.get_double().get(value) == simdjson::SUCCESS) {
    out->numbers.push_back(static_cast<float>(value));
  } else if (e.get_string().get(text) == simdjson::SUCCESS) {
    out->strings.emplace_back(text);
  } else {
    return absl::InvalidArgumentError(absl::StrCat(what, ": expects numbers or strings"));
  }
  if (!out->numbers.empty() && !out->strings.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": mixes numbers and strings"));
  }
  return absl::OkStatus();
}

// Reads an ExplanationMetadata object ({"inputs": {...}, "outputs": {...}}) into `spec`;
// what it names replaces what `spec` had.
static absl::Status ReadMetadata(simdjson::dom::element metadata, const std::string& where,
                                 ExplainSpec* spec) {
  simdjson::dom::object inputs, outputs;
  if (metadata["inputs"].get_object().get(inputs) == simdjson::SUCCESS) {
    for (auto [key, value] : inputs) {
      InputSpec input;
      simdjson::dom::array baselines;
      if (value["inputBaselines"].get_array().get(baselines) == simdjson::SUCCESS) {
        const std::string what =
            absl::StrCat(where, " inputs.", std::string(key), ".inputBaselines");
        for (simdjson::dom::element baseline : baselines) {
          BaselineValue b;
          KILN_RETURN_IF_ERROR(FlattenValues(baseline, what, &b));
          if (b.empty()) return absl::InvalidArgumentError(what + ": a baseline has no values");
          input.baselines.push_back(std::move(b));
        }
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

absl::StatusOr<ExplainSpec> ReadSpec(const ServableVersion& servable, simdjson::dom::element root) {
  ExplainSpec spec;
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
  simdjson::dom::element override_spec, metadata;
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
// ---------------------------------------------------------------------------------------
// Default baselines from the model's warmup data: the median of each element (tensor
// inputs) or of each numeric feature value, the most frequent value of a bytes feature.
// The warmup file is read once per file version (path, size and mtime), not per request.

static float Median(std::vector<float> values) {
  const size_t mid = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + mid, values.end());
  return values[mid];
}

static void AddExampleValues(const tensorflow::Example& example,
                             std::map<std::string, std::vector<BaselineValue>>* seen) {
  for (const auto& [name, feature] : example.features().feature()) {
    BaselineValue v;
    if (feature.has_float_list()) {
      v.numbers.assign(feature.float_list().value().begin(), feature.float_list().value().end());
    } else if (feature.has_int64_list()) {
      for (int64_t x : feature.int64_list().value()) v.numbers.push_back(static_cast<float>(x));
    } else if (feature.has_bytes_list()) {
      v.strings.assign(feature.bytes_list().value().begin(), feature.bytes_list().value().end());
    }
    if (!v.empty()) (*seen)[name].push_back(std::move(v));
  }
}

static void AddInputExamples(const tensorflow::serving::Input& input,
                             std::map<std::string, std::vector<BaselineValue>>* seen) {
  if (input.has_example_list()) {
    for (const auto& e : input.example_list().examples()) AddExampleValues(e, seen);
  } else if (input.has_example_list_with_context()) {
    for (const auto& e : input.example_list_with_context().examples()) {
      tensorflow::Example merged = input.example_list_with_context().context();
      merged.MergeFrom(e);
      AddExampleValues(merged, seen);
    }
  }
}

static WarmupBaselines ComputeWarmupBaselines(
    const std::vector<tensorflow::serving::PredictionLog>& logs) {
  std::map<std::string, std::vector<std::vector<float>>> rows;  // input key -> rows
  std::map<std::string, std::vector<BaselineValue>> features;
  for (const auto& log : logs) {
    if (log.has_classify_log()) AddInputExamples(log.classify_log().request().input(), &features);
    if (log.has_regress_log()) AddInputExamples(log.regress_log().request().input(), &features);
    if (!log.has_predict_log()) continue;
    for (const auto& [key, proto] : log.predict_log().request().inputs()) {
      auto tensor = TensorFromProto(proto, key);
      if (!tensor.ok() || tensor->rank() < 1 || tensor->dim(0) <= 0) continue;
      const int64_t n = tensor->dim(0), size = tensor->num_elements() / n;
      if (tensor->dtype() == DType::kFloat32) {
        for (int64_t r = 0; r < n; ++r) {
          const float* row = tensor->data<float>() + r * size;
          rows[key].emplace_back(row, row + size);
        }
      } else if (tensor->dtype() == DType::kString && size == 1) {
        for (int64_t r = 0; r < n; ++r) {
          tensorflow::Example example;
          if (example.ParseFromString(tensor->data<std::string>()[r])) {
            AddExampleValues(example, &features);
          }
        }
      }
    }
  }
  WarmupBaselines out;
  for (auto& [key, list] : rows) {
    // Rows of the most common size only: a median over mismatched shapes means nothing.
    std::map<size_t, int> sizes;
    for (const auto& r : list) ++sizes[r.size()];
    const size_t size = std::max_element(sizes.begin(), sizes.end(), [](auto& a, auto& b) {
                          return a.second < b.second;
                        })->first;
    std::vector<float> median(size);
    std::vector<float> column;
    for (size_t e = 0; e < size; ++e) {
      column.clear();
      for (const auto& r : list)
        if (r.size() == size) column.push_back(r[e]);
      median[e] = Median(column);
    }
    out.inputs[key] = std::move(median);
  }
  for (auto& [name, values] : features) {
    BaselineValue b;
    if (!values[0].strings.empty()) {
      std::map<std::vector<std::string>, int> counts;
      for (const auto& v : values)
        if (!v.strings.empty()) ++counts[v.strings];
      b.strings = std::max_element(counts.begin(), counts.end(), [](auto& a, auto& c) {
                    return a.second < c.second;
                  })->first;
    } else {
      std::map<size_t, int> sizes;
      for (const auto& v : values) ++sizes[v.numbers.size()];
      const size_t size = std::max_element(sizes.begin(), sizes.end(), [](auto& a, auto& c) {
                            return a.second < c.second;
                          })->first;
      std::vector<float> column;
      for (size_t e = 0; e < size; ++e) {
        column.clear();
        for (const auto& v : values)
          if (v.numbers.size() == size) column.push_back(v.numbers[e]);
        b.numbers.push_back(Median(column));
      }
    }
    out.features[name] = std::move(b);
  }
  return out;
}

// The warmup baselines of `servable`'s model; empty when it has no warmup file. A warmup
// file that fails to read was already refused at load, so errors here leave zeros.
std::shared_ptr<const WarmupBaselines> GetWarmupBaselines(const ServableVersion& servable) {
  // ONNX models in TF Serving's layout keep assets.extra beside the .onnx file.
  const std::string path = WarmupFilePath(
      servable,
      (std::filesystem::path(servable.model().path()).parent_path() / "assets.extra").string());
  static const auto empty = std::make_shared<const WarmupBaselines>();
  if (path.empty()) return empty;
  std::error_code error;
  const auto mtime = std::filesystem::last_write_time(path, error);
  const auto size = std::filesystem::file_size(path, error);
  const std::string key = absl::StrCat(path, "|", size, "|", mtime.time_since_epoch().count());
  static std::mutex mu;
  static std::map<std::string, std::shared_ptr<const WarmupBaselines>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  auto logs = ReadWarmupLogs(path);
  auto baselines =
      logs.ok() ? std::make_shared<const WarmupBaselines>(ComputeWarmupBaselines(*logs)) : empty;
  if (cache.size() > 64) cache.clear();  // models come and go; never grow without bound
  cache[key] = baselines;
  return baselines;
}

// The explained output: the metadata's, else the class scores ("scores", "probabilities")
// when the signature has them, else its first float output.
absl::StatusOr<std::string> ExplainedOutput(const ExplainSpec& spec, const SignatureInfo& signature,
                                            const std::map<std::string, Tensor>& outputs) {
  std::string name;
  if (spec.output) {
    name = spec.output->name;
  } else {
    for (const char* preferred : {"scores", "probabilities"}) {
      auto it = outputs.find(preferred);
      if (it != outputs.end() && it->second.dtype() == DType::kFloat32) name = preferred;
    }
    for (size_t k = 0; name.empty() && k < signature.output_keys.size(); ++k) {
      auto it = outputs.find(signature.output_keys[k]);
      if (it != outputs.end() && it->second.dtype() == DType::kFloat32) name = it->first;
    }
    if (name.empty()) {
      return absl::InvalidArgumentError(
          "the signature has no float output; :explain explains float outputs");
    }
  }
  auto it = outputs.find(name);
  if (it == outputs.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("explanation metadata names output '", name, "', which the signature lacks"));
  }
  if (it->second.dtype() != DType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("output '", name, "' has dtype ",
                                                   DTypeName(it->second.dtype()),
                                                   "; :explain explains float outputs"));
  }
  return name;
}

absl::Status CheckEvaluationBudget(int64_t num_instances, int num_baselines, int num_features,
                                   int path_count, const ExplainLimits& limits) {
  const double total =
      static_cast<double>(ShapleyEvaluationsPerInstance(num_features, path_count)) * num_instances *
      num_baselines;
  if (limits.max_evaluations > 0 && total > static_cast<double>(limits.max_evaluations)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "explain: the request needs ", total, " model evaluations (", num_instances,
        " instances x ", num_baselines, " baselines x (2 + pathCount ", path_count, " x (",
        num_features, " features - 1))), over the explain evaluation budget of ",
        limits.max_evaluations, "; lower pathCount, group features or send fewer instances"));
  }
  return absl::OkStatus();
}

// Runs SampledShapley over every (instance, baseline) row in one call of `evaluate` and
// averages each instance's attributions over its baselines. Efficiency still holds exactly:
// the attributions sum to f(x) minus the mean of f(b) over the baselines.
absl::StatusOr<std::vector<ShapleyAttribution>> Solve(const Problem& problem, int path_count,
                                                      const ExplainLimits& limits,
                                                      const ScalarBatchFn& evaluate) {
  KILN_ASSIGN_OR_RETURN(std::vector<ShapleyAttribution> rows,
                        SampledShapley(problem.instances, problem.baselines, problem.layout,
                                       {.path_count = path_count,
                                        .seed = limits.seed,
                                        .max_evaluations = limits.max_evaluations},
                                       evaluate));
  const int B = problem.num_baselines;
  std::vector<ShapleyAttribution> out(static_cast<size_t>(problem.num_instances));
  for (int64_t n = 0; n < problem.num_instances; ++n) {
    ShapleyAttribution& a = out[n];
    a.attributions.assign(problem.layout.num_features, 0.0);
    double abs_error_sq = 0;
    for (int b = 0; b < B; ++b) {
      const ShapleyAttribution& r = rows[n * B + b];
      for (int i = 0; i < problem.layout.num_features; ++i)
        a.attributions[i] += r.attributions[i] / B;
      a.baseline_output += r.baseline_output / B;
      a.instance_output = r.instance_output;
      // Back to absolute errors: the baselines' estimates are independent, so the error of
      // their mean is the root of the summed squares over B.
      const double delta = std::abs(r.instance_output - r.baseline_output);
      const double abs_error = r.approximation_error * (delta > 1e-12 ? delta : 1.0);
      abs_error_sq += abs_error * abs_error;
    }
    const double abs_error = std::sqrt(abs_error_sq) / B;
    const double delta = std::abs(a.instance_output - a.baseline_output);
    a.approximation_error = delta > 1e-12 ? abs_error / delta : abs_error;
  }
  return out;
}

// One instance's entry of "explanations", around its featureAttributions object.
void AppendExplanation(const ShapleyAttribution& a, const std::string& feature_attributions,
                       int64_t class_index, bool class_scores, const ExplainSpec& spec,
                       const std::string& output_name, std::string* out) {
  out->append("{\"attributions\": [{\"baselineOutputValue\": ");
  AppendDoubleJson(a.baseline_output, out);
  out->append(", \"instanceOutputValue\": ");
  AppendDoubleJson(a.instance_output, out);
  out->append(", \"featureAttributions\": {");
  out->append(feature_attributions);
  out->append("}, \"outputIndex\": [");
  if (class_scores) out->append(std::to_string(class_index));
  out->append("]");
  if (spec.output && class_index < static_cast<int64_t>(spec.output->display_names.size())) {
    out->append(", \"outputDisplayName\": ");
    AppendJsonString(spec.output->display_names[class_index], out);
  }
  out->append(", \"approximationError\": ");
  AppendDoubleJson(a.approximation_error, out);
  out->append(", \"outputName\": ");
  AppendJsonString(output_name, out);
  out->append("}]}");
}

absl::Status RunEvaluationBatch(const ServableVersion& servable, const std::string& signature_key,
                                std::map<std::string, Tensor> inputs,
                                const OutputSelection& selected, int64_t begin, int64_t count,
                                int64_t rows_per_instance, std::vector<double>* values) {
  KILN_ASSIGN_OR_RETURN(auto outputs, servable.Run(signature_key, std::move(inputs)));
  auto it = outputs.find(selected.name);
  if (it == outputs.end() || it->second.num_elements() != count * selected.size) {
    return absl::InternalError(
        absl::StrCat("explain: output '", selected.name, "' missing or of the wrong size"));
  }
  const float* out = it->second.data<float>();
  for (int64_t r = 0; r < count; ++r) {
    const int64_t instance = (begin + r) / rows_per_instance;
    (*values)[begin + r] = out[r * selected.size + selected.class_index[instance]];
  }
  return absl::OkStatus();
}

OutputSelection SelectClasses(const std::string& name, const Tensor& output,
                              int64_t num_instances) {
  OutputSelection s{name, output.num_elements() / num_instances,
                    std::vector<int64_t>(num_instances, 0)};
  for (int64_t n = 0; n < num_instances && s.size > 1; ++n) {
    const float* row = output.data<float>() + n * s.size;
    s.class_index[n] = std::max_element(row, row + s.size) - row;
  }
  return s;
}

// Appends {"predictions": ...}'s members (without the braces) to `out`, closing it.
absl::Status AppendPredictions(const std::map<std::string, Tensor>& outputs,
                               const std::vector<std::string>& order, std::string* out) {
  KILN_ASSIGN_OR_RETURN(std::string predictions,
                        WritePredictResponse(outputs, order, JsonFormat::kRow));
  out->append(predictions, predictions.find('{') + 1, std::string::npos);
  return absl::OkStatus();
}
}  // namespace explain_internal

using namespace explain_internal;  // NOLINT: this file is explain_internal's main user

namespace {

// ---------------------------------------------------------------------------------------
// Tensor inputs.

absl::StatusOr<std::string> ExplainTensors(const ServableVersion& servable, absl::string_view body,
                                           const ExplainSpec& spec, const ExplainLimits& limits) {
  const runtime::Model& model = servable.model();
  KILN_ASSIGN_OR_RETURN(PredictJsonRequest request,
                        ParsePredictRequest(body, [&](absl::string_view name) {
                          return FindServingSignature(model, name);
                        }));
  // The predictions, which also say which class each instance is explained for.
  KILN_ASSIGN_OR_RETURN(PredictResult predicted,
                        RunPredict(servable, request.signature_name, request.inputs, {}));
  const runtime::SignatureInfo& signature = *predicted.signature;

  // Features: every element of every input, in the signature's input order, unless the
  // metadata groups an input.
  Problem problem;
  int64_t num_instances = -1;
  FeatureLayout& layout = problem.layout;
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
  problem.num_instances = num_instances;
  const int64_t row_size = static_cast<int64_t>(layout.feature_of_element.size());

  // Baselines: the metadata's (an input with fewer than the most baselines repeats its
  // last), else the warmup data's median, else zeros.
  std::shared_ptr<const WarmupBaselines> warmup = GetWarmupBaselines(servable);
  for (const std::string& key : signature.input_keys) {
    auto it = spec.inputs.find(key);
    if (it != spec.inputs.end()) {
      problem.num_baselines =
          std::max(problem.num_baselines, static_cast<int>(it->second.baselines.size()));
    }
  }
  const int B = problem.num_baselines;
  KILN_RETURN_IF_ERROR(
      CheckEvaluationBudget(num_instances, B, layout.num_features, spec.path_count, limits));
  std::vector<float> baseline(static_cast<size_t>(B * row_size), 0.0f);
  std::vector<float> instance_rows(static_cast<size_t>(num_instances * row_size));
  int64_t offset = 0;
  for (size_t k = 0; k < signature.input_keys.size(); ++k) {
    const std::string& key = signature.input_keys[k];
    const float* data = request.inputs.at(key).data<float>();
    for (int64_t n = 0; n < num_instances; ++n) {
      std::copy(data + n * row_sizes[k], data + (n + 1) * row_sizes[k],
                instance_rows.begin() + n * row_size + offset);
    }
    auto it = spec.inputs.find(key);
    auto median = warmup->inputs.find(key);
    for (int b = 0; b < B; ++b) {
      float* dst = baseline.data() + b * row_size + offset;
      if (it != spec.inputs.end() && !it->second.baselines.empty()) {
        const BaselineValue& v =
            it->second.baselines[std::min<size_t>(b, it->second.baselines.size() - 1)];
        if (!v.strings.empty() ||
            (v.numbers.size() != 1 && static_cast<int64_t>(v.numbers.size()) != row_sizes[k])) {
          return absl::InvalidArgumentError(
              absl::StrCat("inputBaselines of '", key, "' has ",
                           v.strings.empty() ? v.numbers.size() : v.strings.size(),
                           v.strings.empty() ? " values" : " strings", "; expected 1 or ",
                           row_sizes[k], " numbers (one instance)"));
        }
        for (int64_t e = 0; e < row_sizes[k]; ++e)
          dst[e] = v.numbers[v.numbers.size() == 1 ? 0 : e];
      } else if (median != warmup->inputs.end() &&
                 static_cast<int64_t>(median->second.size()) == row_sizes[k]) {
        std::copy(median->second.begin(), median->second.end(), dst);
      }
    }
    offset += row_sizes[k];
  }
  problem.instances.resize(static_cast<size_t>(num_instances * B * row_size));
  problem.baselines.resize(problem.instances.size());
  for (int64_t n = 0; n < num_instances; ++n) {
    for (int b = 0; b < B; ++b) {
      const int64_t row = (n * B + b) * row_size;
      std::copy_n(instance_rows.begin() + n * row_size, row_size, problem.instances.begin() + row);
      std::copy_n(baseline.begin() + b * row_size, row_size, problem.baselines.begin() + row);
    }
  }

  KILN_ASSIGN_OR_RETURN(std::string output_name,
                        ExplainedOutput(spec, signature, predicted.outputs));
  const OutputSelection selected =
      SelectClasses(output_name, predicted.outputs.at(output_name), num_instances);
  const int64_t per_row = ShapleyEvaluationsPerInstance(layout.num_features, spec.path_count);
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
        if (signature.input_keys.size() == 1) {
          // One input: the rows of this batch already are its tensor, contiguous and
          // row-major. The model reads inputs only, and the rows outlive the run.
          float* first = const_cast<float*>(rows.data()) + begin * row_size;
          inputs.emplace(signature.input_keys[k],
                         Tensor(DType::kFloat32, Shape(dims),
                                Buffer::Wrap(first, count * row_size * sizeof(float), {})));
          break;
        }
        KILN_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(DType::kFloat32, Shape(dims)));
        float* dst = t.data<float>();
        for (int64_t r = 0; r < count; ++r) {
          const float* src = rows.data() + (begin + r) * row_size + col;
          std::copy(src, src + row_sizes[k], dst + r * row_sizes[k]);
        }
        col += row_sizes[k];
        inputs.emplace(signature.input_keys[k], std::move(t));
      }
      KILN_RETURN_IF_ERROR(RunEvaluationBatch(servable, signature.key, std::move(inputs), selected,
                                              begin, count, per_row * B, &values));
    }
    return values;
  };
  KILN_ASSIGN_OR_RETURN(std::vector<ShapleyAttribution> attributions,
                        Solve(problem, spec.path_count, limits, evaluate));

  std::string out = "{\"explanations\": [";
  for (int64_t n = 0; n < num_instances; ++n) {
    const ShapleyAttribution& a = attributions[n];
    std::string features;
    int64_t col = 0;
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
      if (!features.empty()) features.append(", ");
      AppendJsonString(key, &features);
      features.append(": ");
      AppendTensorJson(t, false, &features);
    }
    for (const auto& [group, feature] : group_feature) {
      if (!features.empty()) features.append(", ");
      AppendJsonString(group, &features);
      features.append(": ");
      AppendDoubleJson(a.attributions[feature], &features);
    }
    if (n) out.append(", ");
    AppendExplanation(a, features, selected.class_index[n], selected.size > 1, spec, output_name,
                      &out);
  }
  out.append("], ");
  KILN_RETURN_IF_ERROR(AppendPredictions(predicted.outputs, predicted.output_order, &out));
  return out;
}
}  // namespace

absl::StatusOr<std::string> ExplainJson(const ServableVersion& servable, absl::string_view body,
                                        const ExplainLimits& limits) {
  simdjson::dom::parser parser;
  simdjson::dom::element root;
  if (parser.parse(body.data(), body.size()).get(root) != simdjson::SUCCESS) {
    return absl::InvalidArgumentError("JSON Parse error: the request body is not valid JSON");
  }
  KILN_ASSIGN_OR_RETURN(ExplainSpec spec, ReadSpec(servable, root));
  std::string_view signature_name;
  if (root["signature_name"].get_string().get(signature_name) != simdjson::SUCCESS) {
    signature_name = "";
  }
  KILN_ASSIGN_OR_RETURN(
      const SignatureInfo* signature,
      FindServingSignature(servable.model(),
                           absl::string_view(signature_name.data(), signature_name.size())));
  // A tf.Example model: one string input. Other string inputs (text models) are not
  // explained: there is no feature to switch to a baseline.
  if (signature->input_keys.size() == 1 &&
      signature->inputs.at(signature->input_keys[0]).dtype == DType::kString) {
    return ExplainExamples(servable, body, root, *signature, spec, limits);
  }
  return ExplainTensors(servable, body, spec, limits);
}

}  // namespace kiln::serving
