// Compression at load (ModelOptions::allow_compression, ::mixed_precision_bf16): the
// orchestration between the fp32 graph and the compression passes (kiln/opt/compression.h).
//
// Per signature, on the fp32 graph the optimizer made:
//  1. CompressionOptions from the model options and the CPU (VNNI, bf16 under KILN_MAX_ISA).
//  2. Calibration inputs (a --calibration_inputs directory of .npy files, or batches the caller
//     gives, e.g. kiln serve's warmup requests): the fp32 graph runs on them to record the
//     activation ranges the static int8 passes need (calibration.h), and the fp32 outputs the guard
//     compares against. Without them only dynamic quantization and bf16 apply, unmeasured.
//  3. A copy of the fp32 graph is optimized again with the options (the compression passes).
//  4. The accuracy guard: the copy runs on the calibration inputs; per output it reports the
//     max absolute error, the max relative error (max |compressed - fp32| / max |fp32|) and, for
//     class scores (float [batch, classes>=2]), the top-1 agreement. When an output moves beyond
//     the tolerance, each compressed layer's effect alone is measured, and layers are kept fp32
//     in order of that effect, most sensitive first, until the outputs are within tolerance.
//     When even that fails (or the tolerance is 0 and anything moved), the fp32 graph is used.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/core/signature.h"
#include "kiln/core/tensor.h"
#include "kiln/exec/plan.h"
#include "kiln/ir/graph.h"
#include "kiln/opt/compression.h"
#include "kiln/opt/pass.h"

namespace kiln::runtime {

// One calibration batch: tensors in the signature's input_keys order.
using CalibrationBatch = std::vector<Tensor>;

// Reads `dir`/<input key>.npy for every input of `signature` (first dimension = examples,
// equal across inputs) and cuts it into batches of at most `batch_size` examples, all of one
// size where a divisor of the count in [batch_size / 2, batch_size] exists. float64
// arrays are narrowed to float32 inputs. Errors name the file and the expected dtype/shape.
absl::StatusOr<std::vector<CalibrationBatch>> LoadCalibrationDir(const std::string& dir,
                                                                 const SignatureInfo& signature,
                                                                 int64_t batch_size = 32);

// Batches keyed by input key (e.g. decoded warmup requests) in input_keys order; batches
// missing an input are skipped (counted in `skipped`).
std::vector<CalibrationBatch> CalibrationFromMaps(
    const std::vector<std::map<std::string, Tensor>>& batches, const SignatureInfo& signature,
    int* skipped);

struct OutputAccuracy {
  std::string key;
  double max_abs_error = 0;
  double max_rel_error = 0;      // max abs error / max |fp32| over the output
  double max_abs_reference = 0;  // max |fp32| over the output (finite values)
  bool class_scores = false;
  int64_t examples = 0;
  int64_t top1_agree = 0;
  bool non_finite_mismatch = false;  // NaN/Inf where fp32 had none, or the reverse
  // The number the tolerance is compared with: max_rel_error, and for class scores also the
  // fraction of examples whose top-1 class changed; infinite on a NaN/Inf mismatch.
  double Score() const;
};

struct CompressionSettings {
  bool int8 = false;  // ModelOptions::allow_compression
  bool bf16 = false;  // ModelOptions::mixed_precision_bf16
  double tolerance = 0.02;
  std::string calibration_source;  // for the report: "DIR (N examples)" or "warmup requests"
  // The graph to compress from when it is not the optimized fp32 one: the imported graph of a
  // model that arrives quantized (QDQ), whose DequantizeLinear(weights) the fp32 constant
  // folding turned into float weights, which the QDQ fusion passes can no longer match.
  std::shared_ptr<const ir::Graph> source;
};

struct CompressedSignature {
  std::shared_ptr<ir::Graph> graph;  // the graph to run (the fp32 one when nothing stayed)
  opt::OptimizationLog log;          // what the compression passes changed (final options)
  std::string report;                // the accuracy report and per-layer decisions
  std::vector<OutputAccuracy> accuracy;
  std::vector<std::string> kept_fp32;  // layers the guard kept, most sensitive first
  int compressed_layers = 0;
  bool used_fp32 = false;  // the guard fell back to the fp32 graph
};

// Steps 1-4 above for one signature. `fp32` is the optimized fp32 graph (not changed);
// `pass_options` the options it was optimized with; `compile` the model's compile options.
absl::StatusOr<CompressedSignature> CompressSignature(
    const std::shared_ptr<ir::Graph>& fp32, const opt::PassOptions& pass_options,
    const exec::CompileOptions& compile, const SignatureInfo& signature,
    const std::vector<CalibrationBatch>& calibration, const CompressionSettings& settings);

}  // namespace kiln::runtime
