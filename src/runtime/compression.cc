#include "compression.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kiln/core/clock.h"
#include "kiln/core/npy.h"
#include "kiln/core/status.h"
#include "kiln/exec/plan_cache.h"
#include "kiln/ir/compressed_matmul.h"
#include "kiln/kernels/compressed_matmul.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/runtime/calibration.h"
#include "layer_suffix.h"

namespace kiln::runtime {
namespace {

std::string Fmt(double v) { return absl::StrFormat("%.4g", v); }

absl::StatusOr<Tensor> ToInputDtype(Tensor t, DType want, const std::string& file) {
  if (t.dtype() == want) return t;
  if (t.dtype() == DType::kFloat64 && want == DType::kFloat32) {
    Tensor out(DType::kFloat32, t.shape());
    const double* src = t.data<double>();
    float* dst = out.data<float>();
    for (int64_t i = 0; i < t.num_elements(); ++i) dst[i] = static_cast<float>(src[i]);
    return out;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(file, ": dtype ", DTypeName(t.dtype()), ", the input needs ", DTypeName(want)));
}

// The fp32 graph optimized again with `options`.
absl::StatusOr<std::pair<std::shared_ptr<ir::Graph>, opt::OptimizationLog>> Compress(
    const ir::Graph& fp32, const opt::PassOptions& pass_options,
    const opt::CompressionOptions& options) {
  auto graph = std::make_shared<ir::Graph>(fp32);
  opt::PassOptions po = pass_options;
  po.compression = &options;
  opt::OptimizationLog log;
  KILN_RETURN_IF_ERROR(opt::Optimize(*graph, po, &log));
  KILN_RETURN_IF_ERROR(ir::InferShapes(*graph));
  return std::make_pair(graph, std::move(log));
}

// Nodes of `compressed` that compression made: they carry kCompressedLayerAttr, or they are
// named like an fp32 node whose op they no longer have.
std::vector<std::string> CompressedLayers(const ir::Graph& fp32, const ir::Graph& compressed) {
  std::map<std::string, std::string> fp32_ops;
  for (const ir::Node& n : fp32.nodes()) {
    if (!n.removed && !n.name.empty()) fp32_ops[n.name] = n.domain + "::" + n.op;
  }
  std::vector<std::string> layers;
  absl::flat_hash_set<std::string> seen;
  for (const ir::Node& n : compressed.nodes()) {
    if (n.removed) continue;
    std::string name = n.GetString(ir::kCompressedLayerAttr, "");
    if (name.empty() && !n.name.empty()) {
      auto it = fp32_ops.find(n.name);
      if (it != fp32_ops.end() && it->second != n.domain + "::" + n.op) name = n.name;
    }
    if (!name.empty() && seen.insert(name).second) layers.push_back(name);
  }
  return layers;
}

// Examples in a calibration batch: its first input's first dimension (1 for a scalar).
int64_t ExamplesIn(const CalibrationBatch& batch) {
  return batch.empty() || batch[0].shape().rank() == 0 ? 1 : batch[0].shape().dim(0);
}

bool IsClassScores(const Tensor& t) {
  return t.dtype() == DType::kFloat32 && t.shape().rank() == 2 && t.shape().dim(1) >= 2;
}

// Compares each output over all batches.
std::vector<OutputAccuracy> Compare(const std::vector<std::string>& keys,
                                    const std::vector<std::vector<Tensor>>& reference,
                                    const std::vector<std::vector<Tensor>>& candidate) {
  std::vector<OutputAccuracy> result(keys.size());
  for (size_t o = 0; o < keys.size(); ++o) {
    OutputAccuracy& acc = result[o];
    acc.key = keys[o];
    double ref_max = 0;
    bool all_class_scores = true;
    for (size_t b = 0; b < reference.size(); ++b) {
      const Tensor& r = reference[b][o];
      const Tensor& c = candidate[b][o];
      all_class_scores = all_class_scores && IsClassScores(r);
      if (r.dtype() != c.dtype() || r.shape() != c.shape()) {
        acc.non_finite_mismatch = true;  // cannot happen unless a pass broke the graph
        continue;
      }
      if (r.dtype() != DType::kFloat32) {
        // Integer/string outputs (argmax, labels) must match exactly.
        if (r.dtype() != DType::kString &&
            std::memcmp(r.raw_data(), c.raw_data(), r.byte_size()) != 0) {
          acc.max_abs_error = std::numeric_limits<double>::infinity();
        }
        continue;
      }
      const float* rv = r.data<float>();
      const float* cv = c.data<float>();
      for (int64_t i = 0; i < r.num_elements(); ++i) {
        const bool rf = std::isfinite(rv[i]), cf = std::isfinite(cv[i]);
        if (!rf || !cf) {
          // Equal infinities are agreement; NaN vs NaN too.
          const bool same = (std::isnan(rv[i]) && std::isnan(cv[i])) || rv[i] == cv[i];
          if (!same) acc.non_finite_mismatch = true;
          continue;
        }
        ref_max = std::max(ref_max, std::fabs(static_cast<double>(rv[i])));
        acc.max_abs_error =
            std::max(acc.max_abs_error, std::fabs(static_cast<double>(rv[i]) - cv[i]));
      }
    }
    acc.class_scores = all_class_scores && !reference.empty();
    if (acc.class_scores) {
      for (size_t b = 0; b < reference.size(); ++b) {
        const Tensor& r = reference[b][o];
        const Tensor& c = candidate[b][o];
        if (r.shape() != c.shape()) continue;
        const int64_t rows = r.shape().dim(0), classes = r.shape().dim(1);
        for (int64_t i = 0; i < rows; ++i) {
          const float* rr = r.data<float>() + i * classes;
          const float* cr = c.data<float>() + i * classes;
          acc.top1_agree +=
              std::max_element(rr, rr + classes) - rr == std::max_element(cr, cr + classes) - cr;
        }
        acc.examples += rows;
      }
    }
    acc.max_abs_reference = ref_max;
    acc.max_rel_error =
        ref_max > 0 ? acc.max_abs_error / ref_max : (acc.max_abs_error > 0 ? INFINITY : 0.0);
  }
  return result;
}

// A lower bound of the score a graph gets on every calibration example, from its accuracy
// `first` on the first batches: their errors and changed top-1 classes are among all of them,
// and `all` (any comparison over every example against the same reference) gives the full
// denominators, the largest |fp32| output and the number of examples.
double ScoreAtLeast(const std::vector<OutputAccuracy>& first,
                    const std::vector<OutputAccuracy>& all) {
  double worst = 0;
  for (size_t o = 0; o < first.size() && o < all.size(); ++o) {
    const OutputAccuracy& f = first[o];
    if (f.non_finite_mismatch) return std::numeric_limits<double>::infinity();
    const double ref_max = all[o].max_abs_reference;
    double score = ref_max > 0
                       ? f.max_abs_error / ref_max
                       : (f.max_abs_error > 0 ? std::numeric_limits<double>::infinity() : 0);
    if (f.class_scores && all[o].examples > 0) {
      score = std::max(score, static_cast<double>(f.examples - f.top1_agree) / all[o].examples);
    }
    worst = std::max(worst, score);
  }
  return worst;
}

double WorstScore(const std::vector<OutputAccuracy>& accuracy) {
  double worst = 0;
  for (const OutputAccuracy& a : accuracy) worst = std::max(worst, a.Score());
  return worst;
}

std::string AccuracyLines(const std::vector<OutputAccuracy>& accuracy) {
  std::string out;
  for (const OutputAccuracy& a : accuracy) {
    absl::StrAppend(&out, "    output '", a.key, "': max abs error ", Fmt(a.max_abs_error),
                    ", max rel error ", Fmt(a.max_rel_error));
    if (a.class_scores) {
      absl::StrAppend(
          &out, ", top-1 agreement ",
          absl::StrFormat("%.2f%%", a.examples ? 100.0 * a.top1_agree / a.examples : 100.0), " (",
          a.top1_agree, "/", a.examples, ")");
    }
    if (a.non_finite_mismatch) absl::StrAppend(&out, ", NaN/Inf where fp32 has none (or reverse)");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

}  // namespace

double OutputAccuracy::Score() const {
  if (non_finite_mismatch) return std::numeric_limits<double>::infinity();
  double score = max_rel_error;
  if (class_scores && examples > 0) {
    score = std::max(score, 1.0 - static_cast<double>(top1_agree) / examples);
  }
  return score;
}

absl::StatusOr<std::vector<CalibrationBatch>> LoadCalibrationDir(const std::string& dir,
                                                                 const SignatureInfo& signature,
                                                                 int64_t batch_size) {
  std::vector<Tensor> whole;
  int64_t examples = -1;
  for (const std::string& key : signature.input_keys) {
    const std::string path = (std::filesystem::path(dir) / (key + ".npy")).string();
    absl::StatusOr<Tensor> t = ReadNpy(path);
    if (!t.ok()) {
      return Annotate(t.status(), absl::StrCat("--calibration_inputs: input '", key,
                                               "' of signature '", signature.key, "'"));
    }
    const TensorInfo& info = signature.inputs.at(key);
    KILN_ASSIGN_OR_RETURN(Tensor converted, ToInputDtype(*std::move(t), info.dtype, path));
    if (converted.shape().rank() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a scalar; the first dimension must count examples"));
    }
    if (!info.shape.empty() && static_cast<int>(info.shape.size()) != converted.shape().rank()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": shape ", converted.shape().ToString(),
                                                     ", input '", key, "' has rank ",
                                                     info.shape.size()));
    }
    const int64_t n = converted.shape().dim(0);
    if (examples >= 0 && n != examples) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", n, " examples, other inputs have ", examples));
    }
    examples = n;
    whole.push_back(std::move(converted));
  }
  // A model exported with a fixed batch dimension takes batches of exactly that size (a
  // shorter last batch is left out).
  bool fixed = false;
  for (const std::string& key : signature.input_keys) {
    const TensorInfo& info = signature.inputs.at(key);
    if (!info.shape.empty() && info.shape[0] > 0) {
      batch_size = std::min(batch_size, info.shape[0]);
      fixed = true;
    }
  }
  batch_size = std::max<int64_t>(batch_size, 1);
  if (!fixed && examples > batch_size) {
    // Batches of one size where a divisor of the count allows (200 -> 8 x 25, not 6 x 32 +
    // 8): every batch then runs on one plan, and each plan compile of the fp32 graph (for
    // calibration) and of the compressed one (for the guard) costs its own kernel choices,
    // e.g. timing Winograd against direct for every 3x3 conv.
    for (int64_t b = batch_size; b >= (batch_size + 1) / 2; --b) {
      if (examples % b == 0) {
        batch_size = b;
        break;
      }
    }
  }
  std::vector<CalibrationBatch> batches;
  for (int64_t s = 0; s < examples; s += batch_size) {
    const int64_t end = std::min(examples, s + batch_size);
    if (fixed && end - s < batch_size) break;
    CalibrationBatch batch;
    for (const Tensor& t : whole) batch.push_back(t.Slice(s, end));
    batches.push_back(std::move(batch));
  }
  return batches;
}

std::vector<CalibrationBatch> CalibrationFromMaps(
    const std::vector<std::map<std::string, Tensor>>& batches, const SignatureInfo& signature,
    int* skipped) {
  std::vector<CalibrationBatch> out;
  *skipped = 0;
  for (const auto& m : batches) {
    CalibrationBatch batch;
    for (const std::string& key : signature.input_keys) {
      auto it = m.find(key);
      if (it == m.end() || it->second.dtype() != signature.inputs.at(key).dtype) break;
      batch.push_back(it->second);
    }
    if (batch.size() == signature.input_keys.size()) {
      out.push_back(std::move(batch));
    } else {
      ++*skipped;
    }
  }
  return out;
}

absl::StatusOr<CompressedSignature> CompressSignature(
    const std::shared_ptr<ir::Graph>& fp32, const opt::PassOptions& pass_options,
    const exec::CompileOptions& compile, const SignatureInfo& signature,
    const std::vector<CalibrationBatch>& calibration, const CompressionSettings& settings) {
  const int64_t start = NowNanos();
  opt::CompressionOptions options;
  options.int8_dynamic_matmul = settings.int8;
  options.int8_static = settings.int8 && !calibration.empty();
  options.prune_zero_channels = settings.int8;
  options.bf16 = settings.bf16;
  options.vnni = kernels::CpuHasInt8Vnni();
  options.fp32_winograd = kernels::ConvWinogradEnabled();
  CompressedSignature result;
  std::string& report = result.report;
  absl::StrAppend(&report, "  compression: ");
  std::vector<std::string> what;
  if (settings.int8) {
    what.push_back(absl::StrCat("int8 dynamic MatMul/Gemm (",
                                options.vnni ? "8-bit weights: VNNI"
                                             : "7-bit weights: no VNNI, u8 x s8 pairs would "
                                               "saturate int16 at 8 bits",
                                ")"));
    what.push_back(options.int8_static ? "static int8 where calibrated (Conv chains)"
                                       : "no static int8 (no calibration data)");
    what.push_back("exact pruning of all-zero channels");
  }
  if (settings.bf16) {
    what.push_back(kernels::CpuHasBf16MatMul()
                       ? "bf16 weights (bf16 matmul, fp32 accumulation)"
                       : "bf16 weights (no avx512_bf16: widened to fp32 in the kernel)");
  }
  absl::StrAppend(&report, absl::StrJoin(what, "; "), "\n");

  // The fp32 outputs on the calibration inputs, from the calibration runs themselves when
  // they ran (the same graph and plan options as RunAll below: one fp32 pass instead of two).
  std::vector<std::vector<Tensor>> calibration_reference;
  int64_t calibration_ms = -1;
  const int64_t calibration_start = NowNanos();
  if (!calibration.empty() && options.int8_static) {
    // The collector (calibration.h) takes examples by graph input name.
    std::vector<std::map<std::string, Tensor>> examples;
    for (const CalibrationBatch& batch : calibration) {
      std::map<std::string, Tensor> example;
      for (size_t i = 0; i < batch.size() && i < fp32->inputs.size(); ++i) {
        example[fp32->value(fp32->inputs[i]).name] = batch[i];
      }
      examples.push_back(std::move(example));
    }
    CalibrationOptions calibration_options;
    calibration_options.intra_op_threads = compile.intra_op_threads;
    calibration_options.compile = compile;
    // Its plans are thrown away after: threads per step are not timed for them.
    calibration_options.compile->thread_choice = exec::ThreadChoiceMode::kOff;
    // Runs of about kCalibrationRows rows: --calibration_inputs batches (LoadCalibrationDir's
    // 32) run as they are, single warmup requests are joined. Joining all 200 ResNet-18 images
    // of a directory into one run (8 batches of 32 per run before) wrote 2.5 GB of observed
    // activations into freshly faulted pages; at 32 rows the output tensors of one run are
    // reused by the next.
    constexpr int64_t kCalibrationRows = 32;
    int64_t widest = 1;
    for (const CalibrationBatch& b : calibration) {
      widest = std::max(widest, ExamplesIn(b));
    }
    calibration_options.batch_size =
        static_cast<int>(std::max<int64_t>(1, kCalibrationRows / widest));
    KILN_ASSIGN_OR_RETURN(
        options.activation_ranges,
        CollectActivationRanges(*fp32, examples, calibration_options, &calibration_reference));
    calibration_ms = (NowNanos() - calibration_start) / 1000000;
  }
  const ir::Graph& from = settings.source ? *settings.source : *fp32;
  KILN_ASSIGN_OR_RETURN(auto compressed, Compress(from, pass_options, options));
  const std::vector<std::string> layers = CompressedLayers(*fp32, *compressed.first);
  result.compressed_layers = static_cast<int>(layers.size());
  result.graph = compressed.first;
  result.log = std::move(compressed.second);
  if (calibration.empty()) {
    absl::StrAppend(&report,
                    "  accuracy: not measured (no calibration inputs: give "
                    "--calibration_inputs DIR, or warmup requests in serve); ",
                    layers.size(), " layers compressed\n");
    absl::StrAppend(&report, "  compression took ", (NowNanos() - start) / 1000000, " ms\n");
    return result;
  }
  int64_t examples = 0;
  for (const CalibrationBatch& b : calibration) {
    examples += ExamplesIn(b);
  }
  absl::StrAppend(&report, "  calibration: ", examples, " examples in ", calibration.size(),
                  " batches from ", settings.calibration_source, "\n");
  const int64_t reference_start = NowNanos();
  std::vector<std::vector<Tensor>> reference = std::move(calibration_reference);
  const bool reference_from_calibration = reference.size() == calibration.size();
  if (!reference_from_calibration) {
    KILN_ASSIGN_OR_RETURN(reference, RunOnBatches(fp32, compile, calibration));
  }
  const int64_t reference_ms = (NowNanos() - reference_start) / 1000000;
  const double tolerance = settings.tolerance;
  // The first calibration batches holding kRankingExamples examples: the ranking below runs on
  // them only (it needs an order, not the final figures), and every evaluation checks them first.
  constexpr int64_t kRankingExamples = 16;
  size_t ranking_batches = 0;
  int64_t ranking_examples = 0;
  while (ranking_batches < calibration.size() && ranking_examples < kRankingExamples) {
    const CalibrationBatch& b = calibration[ranking_batches++];
    ranking_examples += ExamplesIn(b);
  }
  // Trial graphs run on throwaway plans: threads per step are not timed for them.
  exec::CompileOptions trial_compile = compile;
  trial_compile.thread_choice = exec::ThreadChoiceMode::kOff;
  // The largest |fp32| output and the number of examples, over all of them: ScoreAtLeast's
  // denominators.
  const std::vector<OutputAccuracy> everything =
      Compare(signature.output_keys, reference, reference);
  // A graph's accuracy on the calibration inputs. The batches run in order, and the run stops
  // once the errors so far (checked after the ranking batches, then at doubling counts) already
  // put the graph beyond the tolerance over every example (ScoreAtLeast): `*examples_run` then
  // says how many examples the returned accuracy covers. ResNet-18 on AVX2 with 200 images spent
  // 86 of its 92.5 s load in the guard when every trial took all of them.
  auto evaluate = [&](std::shared_ptr<const ir::Graph> graph,
                      int64_t* examples_run) -> absl::StatusOr<std::vector<OutputAccuracy>> {
    size_t next_check = std::max<size_t>(ranking_batches, 1);
    std::vector<OutputAccuracy> beyond;
    auto stop = [&](const std::vector<std::vector<Tensor>>& so_far) {
      if (so_far.size() < next_check || so_far.size() == calibration.size()) return false;
      next_check *= 2;
      const std::vector<std::vector<Tensor>> ref(reference.begin(),
                                                 reference.begin() + so_far.size());
      std::vector<OutputAccuracy> acc = Compare(signature.output_keys, ref, so_far);
      if (ScoreAtLeast(acc, everything) <= tolerance) return false;
      beyond = std::move(acc);
      return true;
    };
    KILN_ASSIGN_OR_RETURN(auto out,
                          RunOnBatches(std::move(graph), trial_compile, calibration, stop));
    *examples_run = 0;
    for (size_t b = 0; b < out.size(); ++b) *examples_run += ExamplesIn(calibration[b]);
    if (out.size() < calibration.size()) return beyond;
    return Compare(signature.output_keys, reference, out);
  };
  const int64_t evaluate_start = NowNanos();
  int64_t examples_run = 0;
  KILN_ASSIGN_OR_RETURN(result.accuracy, evaluate(result.graph, &examples_run));
  // Where load time goes (the target is under 10 s for ResNet-18 with 200 images).
  absl::StrAppend(
      &report, "  time: ",
      calibration_ms >= 0 ? absl::StrCat("calibration (fp32 runs) ", calibration_ms, " ms, ") : "",
      reference_from_calibration ? "fp32 reference from the calibration runs"
                                 : absl::StrCat("fp32 reference ", reference_ms, " ms"),
      ", compressed run ", (NowNanos() - evaluate_start) / 1000000, " ms\n");
  absl::StrAppend(&report, "  accuracy vs fp32 on the calibration inputs (tolerance ",
                  Fmt(tolerance), "), all ", layers.size(), " layers compressed",
                  examples_run < examples
                      ? absl::StrCat(": beyond it on the first ", examples_run,
                                     " examples already (the run stopped there)")
                      : "",
                  ":\n", AccuracyLines(result.accuracy));
  if (examples_run == examples && WorstScore(result.accuracy) <= tolerance) {
    absl::StrAppend(&report, "  layers: ", layers.size(), " compressed, none kept fp32\n");
    absl::StrAppend(&report, "  compression took ", (NowNanos() - start) / 1000000, " ms\n");
    return result;
  }
  // Beyond tolerance: each layer's effect alone, then keep the worst ones fp32. The ranking
  // runs on kRankingExamples examples exactly: the batch that reaches the count is cut to it
  // where every input counts examples in its first dimension (ResNet-18's 25-image batches
  // ranked on 25 cost 4.7 of a 10.9 s AVX2 load).
  std::vector<CalibrationBatch> ranking_calibration;
  ranking_examples = 0;
  for (size_t b = 0; b < ranking_batches; ++b) {
    CalibrationBatch batch = calibration[b];
    const int64_t n = ExamplesIn(batch), want = kRankingExamples - ranking_examples;
    const bool rows = std::all_of(batch.begin(), batch.end(), [n](const Tensor& t) {
      return t.shape().rank() >= 1 && t.shape().dim(0) == n;
    });
    if (n > want && rows) {
      for (Tensor& t : batch) t = t.Slice(0, want);
    }
    ranking_examples += ExamplesIn(batch);
    ranking_calibration.push_back(std::move(batch));
  }
  const int64_t ranking_start = NowNanos();
  std::vector<std::pair<double, std::string>> sensitivity;
  if (tolerance > 0 && layers.size() > 1) {
    // With one layer compressed, everything upstream of it computes what fp32 does: only the
    // part it reaches runs (layer_suffix.h), on fp32 values kept from one run.
    std::vector<std::shared_ptr<const ir::Graph>> singles;
    for (const std::string& layer : layers) {
      opt::CompressionOptions alone = options;
      for (const std::string& other : layers) {
        if (other != layer) alone.keep_fp32.insert(other);
      }
      KILN_ASSIGN_OR_RETURN(auto single, Compress(from, pass_options, alone));
      singles.push_back(std::move(single.first));
    }
    KILN_ASSIGN_OR_RETURN(auto suffixes,
                          SuffixRunner::Make(fp32, singles, trial_compile, ranking_calibration));
    int64_t nodes_run = 0, nodes = 0;
    for (size_t i = 0; i < layers.size(); ++i) {
      KILN_ASSIGN_OR_RETURN(auto out, suffixes->Run(i));
      sensitivity.push_back(
          {WorstScore(Compare(signature.output_keys, suffixes->fp32_outputs(), out)), layers[i]});
      nodes_run += suffixes->nodes_run(i);
      nodes += suffixes->nodes(i);
    }
    std::sort(sensitivity.begin(), sensitivity.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    absl::StrAppend(&report, "  time: ", layers.size(), " layers ranked alone on the first ",
                    ranking_examples, " examples in ", (NowNanos() - ranking_start) / 1000000,
                    " ms (each from where it changes the graph: ", nodes_run, " of ", nodes,
                    " nodes run)\n");
  } else if (tolerance > 0) {
    sensitivity.push_back({WorstScore(result.accuracy), layers.empty() ? "" : layers[0]});
  }
  const int64_t guard_start = NowNanos();
  int trials = 0;
  opt::CompressionOptions guarded = options;
  bool within = false;
  for (size_t i = 0; i < sensitivity.size() && !sensitivity[i].second.empty(); ++i) {
    guarded.keep_fp32.insert(sensitivity[i].second);
    result.kept_fp32.push_back(sensitivity[i].second);
    if (result.kept_fp32.size() == layers.size()) break;  // everything fp32: use fp32 below
    KILN_ASSIGN_OR_RETURN(auto attempt, Compress(from, pass_options, guarded));
    ++trials;
    KILN_ASSIGN_OR_RETURN(auto acc, evaluate(attempt.first, &examples_run));
    if (examples_run == examples && WorstScore(acc) <= tolerance) {
      result.graph = attempt.first;
      result.log = std::move(attempt.second);
      result.accuracy = std::move(acc);
      within = true;
      break;
    }
  }
  if (trials > 0) {
    absl::StrAppend(&report, "  time: ", trials, " layer sets tried in ",
                    (NowNanos() - guard_start) / 1000000, " ms\n");
  }
  if (!within) {
    // Nothing compressed stays within the tolerance: the fp32 graph itself, so the outputs
    // are fp32's exactly.
    result.graph = fp32;
    result.log = opt::OptimizationLog();
    result.used_fp32 = true;
    result.kept_fp32 = layers;
    result.accuracy = Compare(signature.output_keys, reference, reference);
    absl::StrAppend(&report,
                    "  layers: none compressed: no compressed layer set stays within "
                    "the tolerance; the model runs in fp32\n");
  } else {
    absl::StrAppend(&report, "  layers: ", layers.size() - result.kept_fp32.size(), " compressed, ",
                    result.kept_fp32.size(), " kept fp32 (most sensitive first):");
    for (size_t i = 0; i < result.kept_fp32.size(); ++i) {
      absl::StrAppend(&report, i ? "," : "", " '", result.kept_fp32[i], "' (",
                      Fmt(sensitivity[i].first), " alone)");
    }
    absl::StrAppend(&report, "\n  accuracy with those layers in fp32:\n",
                    AccuracyLines(result.accuracy));
  }
  absl::StrAppend(&report, "  compression took ", (NowNanos() - start) / 1000000, " ms\n");
  return result;
}

}  // namespace kiln::runtime
