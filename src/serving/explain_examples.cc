// :explain for tf.Example models (one string input of serialized tf.Examples, as TFX,
// Estimator and classify/regress signatures take): each named feature of the Example is one
// feature, switched between the instance's value and the baseline's, and attributions come
// back by feature name. The rows SampledShapley builds are masks (1: the instance's feature,
// 0: the baseline's), and each batch of rows becomes one batch of serialized Examples.
#include <simdjson.h>

#include <algorithm>
#include <map>
#include <set>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/serving/explain.h"
#include "kiln/serving/inference.h"
#include "kiln/serving/json_tensor.h"
#include "serving/explain_internal.h"

namespace kiln::serving::explain_internal {
namespace {

// The instances as Examples: TF Serving's classify/regress "examples" (with "context"
// merged into each), or "instances"/"inputs" holding serialized Examples.
absl::StatusOr<std::vector<tensorflow::Example>> ReadExamples(const runtime::Model& model,
                                                              absl::string_view body,
                                                              simdjson::dom::element root,
                                                              const std::string& input_key) {
  std::vector<tensorflow::Example> examples;
  if (root["examples"].error() == simdjson::SUCCESS) {
    KILN_ASSIGN_OR_RETURN(ExamplesJsonRequest request, ParseExamplesRequest(body));
    for (tensorflow::Example& e : request.examples) {
      if (request.has_context) {
        tensorflow::Example merged = request.context;
        merged.MergeFrom(e);
        e = std::move(merged);
      }
      examples.push_back(std::move(e));
    }
    return examples;
  }
  KILN_ASSIGN_OR_RETURN(PredictJsonRequest request,
                        ParsePredictRequest(body, [&](absl::string_view name) {
                          return FindServingSignature(model, name);
                        }));
  const Tensor& serialized = request.inputs.at(input_key);
  for (int64_t i = 0; i < serialized.num_elements(); ++i) {
    tensorflow::Example e;
    if (!e.ParseFromString(serialized.data<std::string>()[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat("instance ", i, " of input '", input_key,
                       "' is not a serialized tf.Example; send {\"b64\": ...} of one, or the "
                       "features as \"examples\": [{\"feature\": value, ...}]"));
    }
    examples.push_back(std::move(e));
  }
  return examples;
}

// A feature's baseline as an Example feature: the metadata's value, else the warmup median
// (numbers) or most frequent value (bytes), else zeros or empty strings of the instance's
// length. The kind (float, int64, bytes) is always the instance's, so the parser accepts it.
absl::StatusOr<tensorflow::Feature> BaselineFeature(const std::string& name,
                                                    const tensorflow::Feature& instance,
                                                    const BaselineValue* given,
                                                    const WarmupBaselines& warmup) {
  const BaselineValue* value = given;
  if (value == nullptr) {
    auto it = warmup.features.find(name);
    if (it != warmup.features.end()) value = &it->second;
  }
  tensorflow::Feature f;
  const bool bytes = instance.has_bytes_list();
  if (value != nullptr && bytes != value->strings.empty()) {
    if (bytes) {
      f.mutable_bytes_list()->mutable_value()->Add(value->strings.begin(), value->strings.end());
      return f;
    }
    for (float v : value->numbers) {
      if (instance.has_int64_list()) {
        // A float outside int64's range (or NaN) has no integer value: converting it is
        // undefined behaviour, so it is the request's error.
        if (!(v >= -9.2e18f && v <= 9.2e18f)) {
          return absl::InvalidArgumentError(absl::StrCat("inputBaselines of int64 feature '", name,
                                                         "' has ", v, ", not an integer"));
        }
        f.mutable_int64_list()->add_value(static_cast<int64_t>(v));
      } else {
        f.mutable_float_list()->add_value(v);
      }
    }
    return f;
  }
  if (given != nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputBaselines of feature '", name, "' has ", bytes ? "numbers" : "strings",
                     "; the instance's feature has ", bytes ? "bytes" : "numbers"));
  }
  if (bytes) {
    for (int i = 0; i < instance.bytes_list().value_size(); ++i)
      f.mutable_bytes_list()->add_value("");
  } else if (instance.has_int64_list()) {
    for (int i = 0; i < instance.int64_list().value_size(); ++i)
      f.mutable_int64_list()->add_value(0);
  } else {
    for (int i = 0; i < instance.float_list().value_size(); ++i)
      f.mutable_float_list()->add_value(0);
  }
  return f;
}

}  // namespace

absl::StatusOr<std::string> ExplainExamples(const ServableVersion& servable, absl::string_view body,
                                            simdjson::dom::element root,
                                            const SignatureInfo& signature, const ExplainSpec& spec,
                                            const ExplainLimits& limits) {
  const std::string& input_key = signature.input_keys.at(0);
  KILN_ASSIGN_OR_RETURN(std::vector<tensorflow::Example> examples,
                        ReadExamples(servable.model(), body, root, input_key));
  if (examples.empty()) return absl::InvalidArgumentError(":explain needs at least one instance");
  const int64_t num_instances = static_cast<int64_t>(examples.size());
  auto serialize = [](const std::vector<const tensorflow::Example*>& rows) {
    Tensor t(DType::kString, Shape{static_cast<int64_t>(rows.size())});
    for (size_t i = 0; i < rows.size(); ++i)
      t.data<std::string>()[i] = rows[i]->SerializeAsString();
    return t;
  };
  std::vector<const tensorflow::Example*> instance_ptrs;
  for (const auto& e : examples) instance_ptrs.push_back(&e);
  std::map<std::string, Tensor> inputs;
  inputs.emplace(input_key, serialize(instance_ptrs));
  KILN_ASSIGN_OR_RETURN(auto predicted, servable.Run(signature.key, std::move(inputs)));
  KILN_ASSIGN_OR_RETURN(std::string output_name, ExplainedOutput(spec, signature, predicted));
  const OutputSelection selected =
      SelectClasses(output_name, predicted.at(output_name), num_instances);

  // Features: the union of the instances' feature names, sorted (each instance is explained
  // over every one; a feature an instance lacks stays absent in both of its rows, so it gets
  // exactly 0).
  std::set<std::string> names;
  for (const auto& e : examples)
    for (const auto& [name, f] : e.features().feature()) names.insert(name);
  const std::vector<std::string> features(names.begin(), names.end());
  const int M = static_cast<int>(features.size());
  int B = 1;
  for (const std::string& name : features) {
    auto it = spec.inputs.find(name);
    if (it != spec.inputs.end()) B = std::max(B, static_cast<int>(it->second.baselines.size()));
  }
  // Each row is a mask: 1 takes the instance's feature, 0 the baseline's. The Examples of
  // the baselines are built once; the evaluator assembles each row's Example from them.
  KILN_RETURN_IF_ERROR(CheckEvaluationBudget(num_instances, B, M, spec.path_count, limits));
  std::shared_ptr<const WarmupBaselines> warmup = GetWarmupBaselines(servable);
  std::vector<std::vector<std::optional<tensorflow::Feature>>> baseline_features(
      static_cast<size_t>(num_instances * B));
  for (int64_t n = 0; n < num_instances; ++n) {
    const auto& present = examples[n].features().feature();
    for (int b = 0; b < B; ++b) {
      auto& row = baseline_features[n * B + b];
      row.resize(M);
      for (int i = 0; i < M; ++i) {
        auto f = present.find(features[i]);
        if (f == present.end()) continue;  // absent in the instance: absent in its baseline
        auto it = spec.inputs.find(features[i]);
        const BaselineValue* given = nullptr;
        if (it != spec.inputs.end() && !it->second.baselines.empty()) {
          given = &it->second.baselines[std::min<size_t>(b, it->second.baselines.size() - 1)];
        }
        KILN_ASSIGN_OR_RETURN(row[i], BaselineFeature(features[i], f->second, given, *warmup));
      }
    }
  }
  Problem problem;
  problem.num_instances = num_instances;
  problem.num_baselines = B;
  problem.layout.num_features = M;
  for (int i = 0; i < M; ++i) problem.layout.feature_of_element.push_back(i);
  problem.instances.assign(static_cast<size_t>(num_instances * B * M), 1.0f);
  problem.baselines.assign(problem.instances.size(), 0.0f);

  const int64_t per_row = ShapleyEvaluationsPerInstance(M, spec.path_count);
  ScalarBatchFn evaluate = [&](absl::Span<const float> rows,
                               int64_t num_rows) -> absl::StatusOr<std::vector<double>> {
    std::vector<double> values(num_rows);
    std::vector<tensorflow::Example> batch;
    std::vector<const tensorflow::Example*> ptrs;
    for (int64_t begin = 0; begin < num_rows; begin += limits.batch_rows) {
      const int64_t count = std::min(limits.batch_rows, num_rows - begin);
      batch.assign(count, tensorflow::Example());
      ptrs.clear();
      for (int64_t r = 0; r < count; ++r) {
        const int64_t pair = (begin + r) / per_row;  // (instance, baseline) row
        const auto& present = examples[pair / B].features().feature();
        auto& out = *batch[r].mutable_features()->mutable_feature();
        for (int i = 0; i < M; ++i) {
          auto f = present.find(features[i]);
          if (f == present.end()) continue;
          out[features[i]] =
              rows[(begin + r) * M + i] != 0.0f ? f->second : *baseline_features[pair][i];
        }
        ptrs.push_back(&batch[r]);
      }
      std::map<std::string, Tensor> run_inputs;
      run_inputs.emplace(input_key, serialize(ptrs));
      KILN_RETURN_IF_ERROR(RunEvaluationBatch(servable, signature.key, std::move(run_inputs),
                                              selected, begin, count, per_row * B, &values));
    }
    return values;
  };
  KILN_ASSIGN_OR_RETURN(std::vector<ShapleyAttribution> attributions,
                        Solve(problem, spec.path_count, limits, evaluate));

  std::string out = "{\"explanations\": [";
  for (int64_t n = 0; n < num_instances; ++n) {
    std::string by_name;
    const auto& present = examples[n].features().feature();
    for (int i = 0; i < M; ++i) {
      if (!present.contains(features[i])) continue;
      if (!by_name.empty()) by_name.append(", ");
      AppendJsonString(features[i], &by_name);
      by_name.append(": ");
      AppendDoubleJson(attributions[n].attributions[i], &by_name);
    }
    if (n) out.append(", ");
    AppendExplanation(attributions[n], by_name, selected.class_index[n], selected.size > 1, spec,
                      output_name, &out);
  }
  out.append("], ");
  KILN_RETURN_IF_ERROR(AppendPredictions(predicted, signature.output_keys, &out));
  return out;
}

}  // namespace kiln::serving::explain_internal
