// Helpers behind Model::Load, exposed for tools and tests: where a model path points, and
// how threads are split between kernels and branches.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "kiln/import/imported_model.h"
#include "kiln/runtime/model.h"

namespace kiln::runtime {

enum class ModelFormat { kOnnx, kSavedModel };

struct ResolvedModelPath {
  std::string path;  // the .onnx file or the SavedModel directory
  ModelFormat format = ModelFormat::kOnnx;
  int64_t version = -1;  // the version folder chosen under a base path, else -1
};

// A .onnx file; a SavedModel directory (or its saved_model.pb); a directory holding
// model.onnx or exactly one .onnx file; or a base path of numeric version folders holding any
// of these (the highest version wins).
absl::StatusOr<ResolvedModelPath> ResolveModelPath(const std::string& path);

// Imports without optimizing (what Model::Load starts with).
absl::StatusOr<import::ImportedModel> ImportModel(const std::string& path,
                                                  const ModelOptions& options);

struct ThreadSplit {
  int intra = 1;
  int inter = 1;
};
// intra * inter <= cores; 0 means "choose" (see ModelOptions).
ThreadSplit ChooseThreads(int intra_op_threads, int inter_op_threads, int cores);

// "float[-1, 3]" as a signature declares it.
std::string ExpectedString(const TensorInfo& info);
// Whether `shape` matches the declared one (unknown dims match anything).
bool ShapeCompatible(const TensorInfo& info, const Shape& shape);

}  // namespace kiln::runtime
