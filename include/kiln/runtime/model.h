// kiln::runtime::Model: a loaded, optimized model whose signatures can be run. This is the
// one entry point that `kiln run`, `kiln inspect` and `kiln serve` use.
//
//   auto model = kiln::runtime::Model::Load("model.onnx");   // or a SavedModel directory
//   auto outputs = (*model)->Run("serving_default", {{"x", tensor}});
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/core/signature.h"
#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"
#include "kiln/import/imported_model.h"

namespace kiln::runtime {

// Signature metadata lives below the runtime (core/signature.h), so that serving's request
// codecs use it without the runtime.
using kiln::SignatureInfo;
using kiln::TensorInfo;

struct ModelOptions {
  std::string tags = "serve";      // SavedModel MetaGraph tag set, comma-separated
  bool disable_optimizer = false;  // run the imported graph as it is
  // Compression (docs/COMPRESSION.md): int8 MatMul/Gemm (and Conv where calibrated), exact
  // pruning, and the accuracy guard that keeps in fp32 the layers that move the outputs
  // beyond `compression_tolerance` on the calibration inputs.
  bool allow_compression = false;
  // Weights stored as bf16 for MatMul/Gemm (bf16 math with fp32 accumulation where the CPU
  // has avx512_bf16, widened to fp32 in the kernel elsewhere): TF Serving's
  // --mixed_precision=bfloat16. Applies on its own or together with allow_compression.
  bool mixed_precision_bf16 = false;
  // A directory with one .npy per signature input key (first dimension = examples), run
  // through fp32 and the compressed model to calibrate int8 ranges and for the accuracy
  // guard. Empty: the SavedModel's warmup requests when the caller passes them
  // (calibration_inputs below), else only dynamic quantization applies and the guard runs
  // on synthetic inputs.
  std::string calibration_inputs_dir;
  // Calibration inputs given in memory (kiln serve: decoded warmup requests), keyed by
  // signature input key; each entry is one batch. Used when calibration_inputs_dir is empty.
  std::vector<std::map<std::string, Tensor>> calibration_inputs;
  // The largest error the accuracy guard accepts on any output: max |compressed - fp32|
  // divided by max |fp32| of that output, and the fraction of examples whose top-1 class
  // changes for class-score outputs. 0 keeps everything fp32 (outputs equal fp32 exactly).
  double compression_tolerance = 0.02;
  // Threads per kernel and kernels in parallel; 0 picks a split of the cores that never
  // oversubscribes them (intra * inter <= cores).
  int intra_op_threads = 0;
  int inter_op_threads = 0;
  size_t plan_cache_capacity = 32;  // compiled plans kept per signature (LRU)
  // Bytes one run may hold: its planned intermediate values, its outputs, and tensors whose
  // size comes from input values. 0: half of the machine's RAM (MemoryBudget::DefaultLimit).
  // A request beyond it fails with RESOURCE_EXHAUSTED naming the node, op and shape.
  size_t run_memory_budget_bytes = 0;
};

// Per-run statistics, optional.
struct RunStats {
  bool compiled_plan = false;  // this run compiled a new plan (a cache miss)
  int64_t run_ns = 0;
};

// A signature looked up once (Model::GetSignature), for the index-based Run. Valid as long as
// its Model.
class SignatureHandle {
 public:
  virtual const SignatureInfo& signature_info() const = 0;

 protected:
  ~SignatureHandle() = default;
};

class Model {
 public:
  virtual ~Model() = default;

  // `path`: a .onnx file, a SavedModel directory (saved_model.pb or .pbtxt), or a base path
  // holding numeric version folders (the highest is loaded).
  static absl::StatusOr<std::shared_ptr<Model>> Load(const std::string& path,
                                                     const ModelOptions& options = {});

  // A model from an already imported one (tests, tools that build graphs themselves).
  static absl::StatusOr<std::shared_ptr<Model>> FromImported(import::ImportedModel imported,
                                                             const ModelOptions& options = {});

  virtual const std::string& path() const = 0;
  virtual const std::string& platform() const = 0;  // "tensorflow" or "onnx"
  virtual const std::map<std::string, SignatureInfo>& signatures() const = 0;
  // NotFound naming the available signatures when `key` is unknown.
  virtual absl::StatusOr<const SignatureInfo*> FindSignature(absl::string_view key) const = 0;
  // "<dir>/assets.extra" for SavedModels that have one (warmup requests live there), else "".
  virtual const std::string& assets_extra_dir() const = 0;

  // Runs a signature. `inputs` are keyed by the signature's input keys and must all be given;
  // `output_keys` selects outputs (empty: all). Errors name the input and the expected dtype
  // and shape. Thread-safe: many runs may proceed at once.
  virtual absl::StatusOr<std::map<std::string, Tensor>> Run(
      absl::string_view signature, const std::map<std::string, Tensor>& inputs,
      const std::vector<std::string>& output_keys = {}, RunStats* stats = nullptr) const = 0;

  // The index-based form, for callers that run one signature many times (servers, bindings,
  // benchmarks): look the signature up once, then pass `inputs` in the order of
  // signature_info().input_keys and get `outputs` in the order of its output_keys. No maps;
  // errors are the map form's. The map form above is a wrapper of this one.
  virtual absl::StatusOr<const SignatureHandle*> GetSignature(absl::string_view key) const = 0;
  virtual absl::Status Run(const SignatureHandle& signature, absl::Span<const Tensor> inputs,
                           std::vector<Tensor>* outputs, RunStats* stats = nullptr) const = 0;

  // Compiles the plan for these input shapes ahead of traffic.
  virtual absl::Status Precompile(absl::string_view signature,
                                  const std::map<std::string, Shape>& input_shapes) const = 0;

  // What `kiln inspect` prints: signatures, op histogram, optimization log, planned memory.
  virtual std::string Inspect() const = 0;
};

}  // namespace kiln::runtime
