#!/usr/bin/env bash
# Writes the seed corpus of serving_request_fuzz into fuzz/corpus_seeds/serving_request_fuzz/:
# one valid request per file for each REST path and gRPC method the in-memory model serves, so
# the fuzzer starts from requests that reach the tensor decoders and the runtime instead of
# spending its first hours discovering the URL scheme. gRPC seeds are the request messages
# encoded by protoc from text format (see serving_request_fuzz.cc for the input format).
#   bash fuzz/make_serving_seeds.sh        (rerun after changing the seeds below; commit them)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/fuzz/corpus_seeds/serving_request_fuzz"
rm -rf "$out"
mkdir -p "$out"

n=0
rest() {  # rest METHOD TARGET [BODY]
  n=$((n + 1))
  printf '%s %s\n%s' "$1" "$2" "${3:-}" > "$out/$(printf '%02d' $n)-rest"
}
grpc() {  # grpc RPC MESSAGE_TYPE TEXT_PROTO
  n=$((n + 1))
  local file="$out/$(printf '%02d' $n)-grpc-$1"
  printf 'GRPC %s\n' "$1" > "$file"
  printf '%s' "$3" | protoc -I "$root/proto" --encode="tensorflow.serving.$2" \
    "$root/proto/tensorflow_serving/apis/prediction_service.proto" \
    "$root/proto/tensorflow_serving/apis/model_service.proto" >> "$file"
}

m=/v1/models/half_plus_two
# TF Serving v1 predict: row ("instances") and columnar ("inputs") forms, every signature.
rest POST "$m:predict" '{"instances": [[1.0], [2.0], [5.0]]}'
rest POST "$m/versions/1:predict" '{"signature_name": "serving_default", "inputs": {"x": [[1]]}}'
rest POST "$m/labels/stable:predict" '{"inputs": [[0.5], [-1e30]]}'
rest POST "$m:predict" '{"signature_name": "dense", "instances": [[1, 2, 3, 4], [0, 0, 0, -1]]}'
rest POST "$m:predict" '{"signature_name": "dense", "inputs": {"features": []}}'
rest POST "$m:predict" \
  '{"signature_name": "multi", "instances": [{"ids": [1, 2], "name": {"b64": "aGVsbG8="}, "flag": true}, {"ids": [3, 4], "name": "x", "flag": false}]}'
rest POST "$m:predict" \
  '{"signature_name": "multi", "inputs": {"ids": [[1, 2], [3, 4]], "name": ["a", {"b64": "AAEC"}], "flag": [true, false]}}'
# classify / regress on tf.Examples, with and without context.
rest POST "$m:classify" '{"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}, {"x": [2.0]}]}'
rest POST "$m:regress" \
  '{"signature_name": "regress_x_to_y", "context": {"y": "abc"}, "examples": [{"x": 3.0}, {"x": {"b64": "AAAA"}}]}'
# Status and metadata.
rest GET "$m"
rest GET "$m/versions/1"
rest GET "$m/labels/stable"
rest GET "$m/metadata"
rest GET "$m/versions/1/metadata"
# KServe v2: infer with declared shapes (and a zero batch), metadata, readiness.
v2=/v2/models/half_plus_two
rest POST "$v2/infer" '{"inputs": [{"name": "x", "shape": [2, 1], "datatype": "FP32", "data": [1, 2]}]}'
rest POST "$v2/versions/1/infer" \
  '{"id": "r1", "inputs": [{"name": "x", "shape": [3, 1], "datatype": "FP32", "data": [[1], [2], [3]]}], "outputs": [{"name": "y"}]}'
rest POST "$v2/infer" '{"inputs": [{"name": "x", "shape": [0, 1], "datatype": "FP32", "data": []}]}'
rest GET "$v2"
rest GET "$v2/versions/1"
rest GET "$v2/ready"
rest GET /v2/health/ready
rest GET /v2/health/live
rest GET /v2
rest GET /monitoring/prometheus/metrics

spec='model_spec { name: "half_plus_two" signature_name: "%s" }'
example='examples { features { feature { key: "x" value { float_list { value: %s } } } } }'
grpc Predict PredictRequest "$(printf "$spec" serving_default)
  inputs { key: \"x\" value { dtype: DT_FLOAT tensor_shape { dim { size: 2 } dim { size: 1 } }
           float_val: 1 float_val: 2 } }"
grpc Predict PredictRequest "$(printf "$spec" dense)
  inputs { key: \"features\" value { dtype: DT_FLOAT
           tensor_shape { dim { size: 1 } dim { size: 4 } }
           tensor_content: \"\\000\\000\\200?\\000\\000\\000@\\000\\000@@\\000\\000\\200@\" } }
  output_filter: \"probs\""
grpc Predict PredictRequest "model_spec { name: \"half_plus_two\" version { value: 1 }
             signature_name: \"multi\" }
  inputs { key: \"ids\" value { dtype: DT_INT64 tensor_shape { dim { size: 1 } dim { size: 2 } }
           int64_val: 7 int64_val: 8 } }
  inputs { key: \"name\" value { dtype: DT_STRING tensor_shape { dim { size: 1 } }
           string_val: \"abc\" } }
  inputs { key: \"flag\" value { dtype: DT_BOOL tensor_shape { dim { size: 1 } } bool_val: true } }"
grpc Classify ClassificationRequest "$(printf "$spec" classify_x_to_y)
  input { example_list { $(printf "$example" 1) $(printf "$example" 2) } }"
grpc Regress RegressionRequest "$(printf "$spec" regress_x_to_y)
  input { example_list_with_context { $(printf "$example" 3)
          context { features { feature { key: \"y\" value { int64_list { value: 5 } } } } } } }"
grpc MultiInference MultiInferenceRequest "
  tasks { $(printf "$spec" classify_x_to_y) method_name: \"tensorflow/serving/classify\" }
  tasks { $(printf "$spec" regress_x_to_y) method_name: \"tensorflow/serving/regress\" }
  input { example_list { $(printf "$example" 4) } }"
grpc GetModelMetadata GetModelMetadataRequest \
  'model_spec { name: "half_plus_two" } metadata_field: "signature_def"'
grpc GetModelStatus GetModelStatusRequest 'model_spec { name: "half_plus_two" version { value: 1 } }'
# One value filling a shape of 3 GiB: held to the run memory budget before allocating (a
# fuzzer finding; the decoder allocated first).
grpc Predict PredictRequest "$(printf "$spec" serving_default)
  inputs { key: \"x\" value { dtype: DT_FLOAT
           tensor_shape { dim { size: 805306368 } dim { size: 1 } } float_val: 1 } }"

echo "wrote $n seeds to $out"
