#include "kiln/runtime/model.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/container/inlined_vector.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compression.h"
#include "kiln/core/clock.h"
#include "kiln/core/memory_budget.h"
#include "kiln/core/status.h"
#include "kiln/exec/node_evaluator.h"
#include "kiln/exec/plan_cache.h"
#include "kiln/ir/variable.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/opt/pass.h"
#include "kiln/runtime/loader.h"

#ifdef KILN_HAVE_ONNX_IMPORT
#include "kiln/import/onnx.h"
#endif
#ifdef KILN_HAVE_TF_IMPORT
#include "kiln/import/saved_model.h"
#endif

namespace kiln::runtime {
namespace fs = std::filesystem;

std::string ShapeString(const TensorInfo& info) {
  if (!info.rank_known) return "[?]";
  return absl::StrCat("[", absl::StrJoin(info.shape, ", "), "]");
}

std::string ExpectedString(const TensorInfo& info) {
  return absl::StrCat(DTypeName(info.dtype), ShapeString(info));
}

bool ShapeCompatible(const TensorInfo& info, const Shape& shape) {
  if (!info.rank_known) return true;
  if (static_cast<int>(info.shape.size()) != shape.rank()) return false;
  for (int i = 0; i < shape.rank(); ++i) {
    if (info.shape[i] >= 0 && info.shape[i] != shape.dim(i)) return false;
  }
  return true;
}

ThreadSplit ChooseThreads(int intra, int inter, int cores) {
  cores = std::max(1, cores);
  ThreadSplit split;
  if (intra <= 0 && inter <= 0) {
    // Most graphs are chains: threads help inside kernels more than across them.
    split.inter = 1;
    split.intra = cores;
  } else if (inter <= 0) {
    split.intra = std::min(intra, cores);
    split.inter = std::max(1, cores / split.intra);
  } else if (intra <= 0) {
    split.inter = std::min(inter, cores);
    split.intra = std::max(1, cores / split.inter);
  } else {
    split.inter = std::min(inter, cores);
    split.intra = std::max(1, std::min(intra, cores / split.inter));
  }
  return split;
}

absl::StatusOr<ResolvedModelPath> ResolveModelPath(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (!fs::exists(p, ec))
    return absl::NotFoundError(absl::StrCat("model path ", path, " does not exist"));
  if (fs::is_regular_file(p, ec)) {
    if (absl::EndsWith(path, ".pb") || absl::EndsWith(path, ".pbtxt")) {
      if (p.filename() == "saved_model.pb" || p.filename() == "saved_model.pbtxt") {
        return ResolvedModelPath{p.parent_path().string(), ModelFormat::kSavedModel};
      }
    }
    return ResolvedModelPath{path, ModelFormat::kOnnx};
  }
  if (!fs::is_directory(p, ec)) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is neither a file nor a directory"));
  }
  auto classify = [](const fs::path& dir) -> std::optional<ResolvedModelPath> {
    std::error_code e;
    if (fs::exists(dir / "saved_model.pb", e) || fs::exists(dir / "saved_model.pbtxt", e)) {
      return ResolvedModelPath{dir.string(), ModelFormat::kSavedModel};
    }
    if (fs::exists(dir / "model.onnx", e)) {
      return ResolvedModelPath{(dir / "model.onnx").string(), ModelFormat::kOnnx};
    }
    std::vector<fs::path> onnx_files;
    for (const auto& entry : fs::directory_iterator(dir, e)) {
      if (entry.is_regular_file() && entry.path().extension() == ".onnx") {
        onnx_files.push_back(entry.path());
      }
    }
    if (onnx_files.size() == 1)
      return ResolvedModelPath{onnx_files[0].string(), ModelFormat::kOnnx};
    return std::nullopt;
  };
  if (auto direct = classify(p)) return *direct;
  // A base path: numeric version folders, the highest wins (TF Serving's layout).
  int64_t best = -1;
  fs::path best_dir;
  for (const auto& entry : fs::directory_iterator(p, ec)) {
    if (!entry.is_directory()) continue;
    int64_t version;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &version)) continue;
    if (version > best && classify(entry.path()).has_value()) {
      best = version;
      best_dir = entry.path();
    }
  }
  if (best < 0) {
    return absl::NotFoundError(absl::StrCat(
        path,
        " holds no model: expected saved_model.pb, saved_model.pbtxt, a .onnx file, or "
        "numeric version folders holding one of them"));
  }
  auto resolved = *classify(best_dir);
  resolved.version = best;
  return resolved;
}

namespace {

struct SignatureRuntime final : SignatureHandle {
  const SignatureInfo& signature_info() const override { return info; }
  SignatureInfo info;
  std::shared_ptr<const ir::Graph> graph;
  std::unique_ptr<exec::PlanCache> cache;
  opt::OptimizationLog log;
  std::map<std::string, int> op_histogram;
  std::string compression_report;  // empty unless compression was on (compression.h)
};

class ModelImpl : public Model {
 public:
  const std::string& path() const override { return path_; }
  const std::string& platform() const override { return platform_; }
  const std::map<std::string, SignatureInfo>& signatures() const override { return infos_; }
  const std::string& assets_extra_dir() const override { return assets_extra_dir_; }

  absl::StatusOr<const SignatureInfo*> FindSignature(absl::string_view key) const override {
    auto it = infos_.find(std::string(key));
    if (it == infos_.end()) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : infos_) keys.push_back(k);
      return absl::NotFoundError(absl::StrCat("no signature '", key, "' in model ", path_,
                                              "; available: ", absl::StrJoin(keys, ", ")));
    }
    return &it->second;
  }

  absl::StatusOr<std::map<std::string, Tensor>> Run(absl::string_view signature,
                                                    const std::map<std::string, Tensor>& inputs,
                                                    const std::vector<std::string>& output_keys,
                                                    RunStats* stats) const override {
    // The last line of defence: an allocation that fails or a library that throws ends this
    // run with an error, never the process (a server runs many requests at once).
    try {
      return RunUnguarded(signature, inputs, output_keys, stats);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("signature '", signature,
                       "': out of memory while running this request (the run "
                       "memory budget is ",
                       options_.run_memory_budget_bytes != 0 ? options_.run_memory_budget_bytes
                                                             : MemoryBudget::DefaultLimit(),
                       " bytes)"));
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("signature '", signature, "': unexpected error: ", e.what()));
    }
  }

  absl::StatusOr<const SignatureHandle*> GetSignature(absl::string_view key) const override {
    KILN_ASSIGN_OR_RETURN(const SignatureRuntime* sig, Find(key));
    return sig;
  }

  absl::Status Run(const SignatureHandle& signature, absl::Span<const Tensor> inputs,
                   std::vector<Tensor>* outputs, RunStats* stats) const override {
    try {
      return RunIndexed(static_cast<const SignatureRuntime&>(signature), inputs, outputs, stats);
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("signature '", signature.signature_info().key,
                       "': out of memory while running this request (the run memory budget is ",
                       options_.run_memory_budget_bytes != 0 ? options_.run_memory_budget_bytes
                                                             : MemoryBudget::DefaultLimit(),
                       " bytes)"));
    } catch (const std::exception& e) {
      return absl::InternalError(absl::StrCat("signature '", signature.signature_info().key,
                                              "': unexpected error: ", e.what()));
    }
  }

  absl::Status RunIndexed(const SignatureRuntime& sig, absl::Span<const Tensor> inputs,
                          std::vector<Tensor>* outputs, RunStats* stats) const {
    const int64_t start = NowNanos();
    const SignatureInfo& info = sig.info;
    if (inputs.size() != info.input_keys.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("signature '", info.key, "' takes ", info.input_keys.size(), " inputs (",
                       absl::StrJoin(info.input_keys, ", "), "), got ", inputs.size()));
    }
    // Shapes for the plan lookup; inline up to 8 inputs, so a warm run does not allocate here.
    absl::InlinedVector<Shape, 8> shapes;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorInfo& expected = info.inputs.at(info.input_keys[i]);
      const Tensor& t = inputs[i];
      if (!t.valid() || t.dtype() != expected.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", info.input_keys[i], "' must be ", ExpectedString(expected), ", got ",
            t.valid() ? absl::StrCat(DTypeName(t.dtype()), t.shape().ToString())
                      : std::string("no tensor")));
      }
      shapes.push_back(t.shape());
    }
    bool compiled = false;
    auto plan = sig.cache->Get(shapes, &compiled);
    if (!plan.ok()) return ExplainCompileError(sig, {shapes.begin(), shapes.end()}, plan.status());
    absl::Status status = (*plan)->Run(inputs, outputs);
    if (!status.ok()) return ExplainCompileError(sig, {shapes.begin(), shapes.end()}, status);
    if (stats != nullptr) {
      stats->compiled_plan = compiled;
      stats->run_ns = NowNanos() - start;
    }
    return absl::OkStatus();
  }

  // The map form: names checked and ordered, then the index-based run.
  absl::StatusOr<std::map<std::string, Tensor>> RunUnguarded(
      absl::string_view signature, const std::map<std::string, Tensor>& inputs,
      const std::vector<std::string>& output_keys, RunStats* stats) const {
    KILN_ASSIGN_OR_RETURN(const SignatureRuntime* sig, Find(signature));
    const SignatureInfo& info = sig->info;
    std::vector<Tensor> ordered;
    ordered.reserve(info.input_keys.size());
    for (const auto& [key, tensor] : inputs) {
      if (info.inputs.count(key) == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown input '", key, "' for signature '", info.key,
                         "'; its inputs are: ", absl::StrJoin(info.input_keys, ", ")));
      }
    }
    for (const std::string& key : info.input_keys) {
      const TensorInfo& expected = info.inputs.at(key);
      auto it = inputs.find(key);
      if (it == inputs.end()) {
        return absl::InvalidArgumentError(absl::StrCat("missing input '", key, "' of signature '",
                                                       info.key, "' (expected ",
                                                       ExpectedString(expected), ")"));
      }
      ordered.push_back(it->second);
    }
    for (const std::string& key : output_keys) {
      if (std::find(info.output_keys.begin(), info.output_keys.end(), key) ==
          info.output_keys.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown output '", key, "' for signature '", info.key,
                         "'; its outputs are: ", absl::StrJoin(info.output_keys, ", ")));
      }
    }
    std::vector<Tensor> outputs;
    KILN_RETURN_IF_ERROR(RunIndexed(*sig, ordered, &outputs, stats));
    std::map<std::string, Tensor> result;
    if (output_keys.empty()) {
      for (size_t i = 0; i < info.output_keys.size(); ++i) {
        result[info.output_keys[i]] = std::move(outputs[i]);
      }
    } else {
      for (const std::string& key : output_keys) {
        auto pos = std::find(info.output_keys.begin(), info.output_keys.end(), key);
        result[key] = outputs[pos - info.output_keys.begin()];
      }
    }
    return result;
  }

  absl::Status Precompile(absl::string_view signature,
                          const std::map<std::string, Shape>& input_shapes) const override {
    KILN_ASSIGN_OR_RETURN(const SignatureRuntime* sig, Find(signature));
    std::vector<Shape> shapes;
    for (const std::string& key : sig->info.input_keys) {
      auto it = input_shapes.find(key);
      if (it == input_shapes.end()) {
        return absl::InvalidArgumentError(absl::StrCat("Precompile: no shape for input '", key,
                                                       "' of signature '", sig->info.key, "'"));
      }
      shapes.push_back(it->second);
    }
    for (const auto& [key, shape] : input_shapes) {
      if (sig->info.inputs.count(key) == 0) {
        return absl::InvalidArgumentError(absl::StrCat("Precompile: unknown input '", key,
                                                       "' for signature '", sig->info.key, "'"));
      }
    }
    try {
      auto plan = sig->cache->Get(shapes);
      if (!plan.ok()) return ExplainCompileError(*sig, shapes, plan.status());
    } catch (const std::bad_alloc&) {
      return absl::ResourceExhaustedError(
          absl::StrCat("signature '", sig->info.key, "': out of memory compiling a plan"));
    }
    return absl::OkStatus();
  }

  std::string Inspect() const override;

  absl::Status Init(import::ImportedModel imported, const ModelOptions& options);
  absl::StatusOr<std::shared_ptr<ir::Graph>> CompressAtLoad(
      const std::shared_ptr<ir::Graph>& graph, const opt::PassOptions& pass_options,
      const exec::CompileOptions& compile, SignatureRuntime& rt, const ModelOptions& options,
      std::shared_ptr<const ir::Graph> source);

 private:
  absl::StatusOr<const SignatureRuntime*> Find(absl::string_view key) const {
    auto it = runtimes_.find(std::string(key));
    if (it == runtimes_.end()) {
      KILN_RETURN_IF_ERROR(FindSignature(key).status());
    }
    return &it->second;
  }

  // A plan that cannot be built for the shapes given: when a shape differs from what the
  // signature declares, say so (the usual cause); TensorFlow itself checks no further than
  // whether the graph can run, so neither do we.
  absl::Status ExplainCompileError(const SignatureRuntime& sig, const std::vector<Shape>& shapes,
                                   const absl::Status& error) const {
    std::vector<std::string> mismatches;
    for (size_t i = 0; i < sig.info.input_keys.size(); ++i) {
      const TensorInfo& expected = sig.info.inputs.at(sig.info.input_keys[i]);
      if (!ShapeCompatible(expected, shapes[i])) {
        mismatches.push_back(absl::StrCat("input '", sig.info.input_keys[i], "' has shape ",
                                          shapes[i].ToString(), ", expected ",
                                          ExpectedString(expected)));
      }
    }
    if (mismatches.empty()) return error;
    return absl::Status(
        absl::IsUnimplemented(error) ? error.code() : absl::StatusCode::kInvalidArgument,
        absl::StrCat(absl::StrJoin(mismatches, "; "), ": ", error.message()));
  }

  std::string path_;
  std::string platform_;
  std::string assets_extra_dir_;
  std::vector<std::pair<std::string, std::string>> properties_;
  std::map<std::string, SignatureInfo> infos_;
  std::map<std::string, SignatureRuntime> runtimes_;
  std::unique_ptr<ThreadPool> inter_pool_;
  ThreadSplit threads_;
  ModelOptions options_;
};

// True when `graph` dequantizes constant 8-bit weights (the QDQ form of ONNX Runtime's
// quantize_static), which the QDQ fusion passes (src/opt/fuse_qdq*.cc) match.
bool HasQuantizedWeights(const ir::Graph& graph) {
  for (const ir::Node& node : graph.nodes()) {
    if (node.removed || !node.domain.empty() || node.op != "DequantizeLinear" ||
        node.inputs.empty() || !graph.IsConstant(node.inputs[0])) {
      continue;
    }
    const DType t = graph.value(node.inputs[0]).constant->dtype();
    if (t == DType::kInt8 || t == DType::kUInt8) return true;
  }
  return false;
}

// Compression of one signature's optimized fp32 graph (compression.h); the report goes to
// the signature's Inspect() text and to stderr, the load log of `kiln serve` and `kiln run`.
absl::StatusOr<std::shared_ptr<ir::Graph>> ModelImpl::CompressAtLoad(
    const std::shared_ptr<ir::Graph>& graph, const opt::PassOptions& pass_options,
    const exec::CompileOptions& compile, SignatureRuntime& rt, const ModelOptions& options,
    std::shared_ptr<const ir::Graph> source) {
  CompressionSettings settings;
  settings.source = std::move(source);
  settings.int8 = options.allow_compression;
  settings.bf16 = options.mixed_precision_bf16;
  settings.tolerance = options.compression_tolerance;
  if (!(settings.tolerance >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("compression tolerance must be >= 0; got ", settings.tolerance));
  }
  std::vector<CalibrationBatch> calibration;
  std::string note;
  if (!options.calibration_inputs_dir.empty()) {
    bool complete = true;
    for (const std::string& key : rt.info.input_keys) {
      complete = complete &&
                 std::filesystem::exists(std::filesystem::path(options.calibration_inputs_dir) /
                                         (key + ".npy"));
    }
    if (complete) {
      KILN_ASSIGN_OR_RETURN(calibration,
                            LoadCalibrationDir(options.calibration_inputs_dir, rt.info));
      settings.calibration_source = options.calibration_inputs_dir;
    } else {
      note = absl::StrCat("  (", options.calibration_inputs_dir, " lacks <input key>.npy for ",
                          "an input of this signature: no calibration for it)\n");
    }
  } else if (!options.calibration_inputs.empty()) {
    int skipped = 0;
    calibration = CalibrationFromMaps(options.calibration_inputs, rt.info, &skipped);
    settings.calibration_source =
        absl::StrCat("the given inputs (warmup requests in kiln serve; ", skipped,
                     " without this signature's inputs skipped)");
  }
  absl::StatusOr<CompressedSignature> made =
      CompressSignature(graph, pass_options, compile, rt.info, calibration, settings);
  if (!made.ok()) {
    return Annotate(made.status(), absl::StrCat("compressing signature '", rt.info.key, "'"));
  }
  CompressedSignature& compressed = *made;
  // The fp32 passes changed nothing the second time: what this log holds is compression
  // (and what it let other passes do).
  for (opt::OptimizationLogEntry& e : compressed.log.entries) {
    rt.log.entries.push_back(std::move(e));
  }
  rt.log.nodes_after = compressed.graph->num_live_nodes();
  rt.compression_report = compressed.report + note;
  std::fprintf(stderr, "kiln: %s signature '%s':\n%s", path_.c_str(), rt.info.key.c_str(),
               rt.compression_report.c_str());
  return compressed.graph;
}

absl::Status ModelImpl::Init(import::ImportedModel imported, const ModelOptions& options) {
  options_ = options;
  path_ = imported.path;
  platform_ = imported.platform;
  assets_extra_dir_ = imported.assets_extra_dir;
  properties_ = imported.properties;
  threads_ = ChooseThreads(options.intra_op_threads, options.inter_op_threads,
                           ThreadPool::HardwareConcurrency());
  // Intra-op loops run on the OpenMP team that oneDNN's primitives use (no kiln-intra pool):
  // two sets of intra-op workers would compete for the same cores.
  if (threads_.inter > 1)
    inter_pool_ = std::make_unique<ThreadPool>(threads_.inter - 1, "kiln-inter");
  exec::CompileOptions compile;
  compile.intra_op_threads = threads_.intra;
  compile.intra_op_openmp = threads_.intra > 1;
  compile.inter_op_threads = threads_.inter;
  compile.inter_op_pool = inter_pool_.get();
  compile.fold_constants = !options.disable_optimizer;
  compile.run_memory_budget_bytes = options.run_memory_budget_bytes;
  if (imported.signatures.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("model ", path_, " has no signatures"));
  }
  for (import::SignatureGraph& sg : imported.signatures) {
    SignatureRuntime rt;
    rt.info.key = sg.key;
    rt.info.method_name = sg.method_name;
    rt.info.input_keys = sg.input_keys;
    rt.info.output_keys = sg.output_keys;
    rt.info.inputs = sg.inputs;
    rt.info.outputs = sg.outputs;
    if (sg.graph.inputs.size() != sg.input_keys.size() ||
        sg.graph.outputs.size() != sg.output_keys.size()) {
      return absl::InternalError(
          absl::StrCat("signature '", sg.key, "': graph inputs/outputs do not match its keys"));
    }
    auto graph = std::make_shared<ir::Graph>(std::move(sg.graph));
    KILN_RETURN_IF_ERROR(Annotate(ir::Verify(*graph), absl::StrCat("signature '", sg.key, "'")));
    // Keep the importer's declared dtypes on graph inputs: plans take dtypes from there.
    for (size_t i = 0; i < graph->inputs.size(); ++i) {
      ir::Value& v = graph->value(graph->inputs[i]);
      if (v.type.dtype == DType::kInvalid) v.type.dtype = rt.info.inputs.at(sg.input_keys[i]).dtype;
    }
    rt.log.nodes_before = graph->num_live_nodes();
    // A model that arrives quantized (QDQ) is compressed from the imported graph: the fp32
    // optimization below folds its DequantizeLinear(weights) into float weights.
    std::shared_ptr<const ir::Graph> quantized_source;
    if (!options.disable_optimizer && options.allow_compression && HasQuantizedWeights(*graph)) {
      quantized_source = std::make_shared<const ir::Graph>(*graph);
    }
    opt::PassOptions pass_options;
    const exec::KernelEvaluator evaluator;
    if (options.disable_optimizer) {
      rt.log.disabled = true;
      rt.log.nodes_after = rt.log.nodes_before;
    } else {
      pass_options.conv_activation_layout = kernels::PreferredConvActivationLayout();
      pass_options.winograd_conv_layout = kernels::WinogradConvActivationLayout();
      pass_options.fuse_conv_depthwise = !options.allow_compression;
      pass_options.evaluator = &evaluator;
      KILN_RETURN_IF_ERROR(Annotate(opt::Optimize(*graph, pass_options, &rt.log),
                                    absl::StrCat("optimizing signature '", sg.key, "'")));
    }
    // Verify() above rejected cycles in the imported graph, so a failure here means a pass
    // broke the graph: report it rather than compile plans from untyped values.
    KILN_RETURN_IF_ERROR(Annotate(ir::InferShapes(*graph),
                                  absl::StrCat("signature '", sg.key, "' after optimization")));
    // Compression's accuracy guard runs the signature, and a run of one that writes a mutable
    // variable (kiln/ir/variable.h) would change the model's state before serving.
    const bool writes_variables =
        std::any_of(graph->nodes().begin(), graph->nodes().end(), [](const ir::Node& node) {
          return !node.removed && node.domain == "kiln" && node.op != "ReadVariable" &&
                 node.HasAttr(ir::kVariableAttr);
        });
    if (writes_variables && (options.allow_compression || options.mixed_precision_bf16)) {
      rt.compression_report =
          "  not compressed: the signature writes variables, and compression's accuracy guard "
          "would run it (changing them) before serving\n";
    } else if (!options.disable_optimizer &&
               (options.allow_compression || options.mixed_precision_bf16)) {
      KILN_ASSIGN_OR_RETURN(graph, CompressAtLoad(graph, pass_options, compile, rt, options,
                                                  std::move(quantized_source)));
    }
    for (const ir::Node& node : graph->nodes()) {
      if (!node.removed) {
        ++rt.op_histogram[node.domain.empty() ? node.op : node.domain + "::" + node.op];
      }
    }
    rt.graph = graph;
    rt.cache = std::make_unique<exec::PlanCache>(rt.graph, compile, options.plan_cache_capacity);
    infos_[sg.key] = rt.info;
    runtimes_.emplace(sg.key, std::move(rt));
  }
  return absl::OkStatus();
}

std::string ModelImpl::Inspect() const {
  std::string out = absl::StrCat("Model: ", path_, " (", platform_, ")\n");
  for (const auto& [k, v] : properties_) absl::StrAppend(&out, "  ", k, ": ", v, "\n");
  absl::StrAppend(&out, "Threads: ", threads_.intra, " intra-op x ", threads_.inter, " inter-op\n");
  for (const auto& [key, rt] : runtimes_) {
    const SignatureInfo& info = rt.info;
    absl::StrAppend(&out, "\nSignature '", key, "' (", info.method_name, ")\n  inputs:\n");
    for (const std::string& k : info.input_keys) {
      const TensorInfo& t = info.inputs.at(k);
      absl::StrAppend(&out, "    ", k, ": ", ExpectedString(t),
                      t.name.empty() || t.name == k ? "" : absl::StrCat("  (", t.name, ")"), "\n");
    }
    absl::StrAppend(&out, "  outputs:\n");
    for (const std::string& k : info.output_keys) {
      const TensorInfo& t = info.outputs.at(k);
      absl::StrAppend(&out, "    ", k, ": ", ExpectedString(t),
                      t.name.empty() || t.name == k ? "" : absl::StrCat("  (", t.name, ")"), "\n");
    }
    std::vector<std::pair<int, std::string>> ops;
    for (const auto& [op, n] : rt.op_histogram) ops.push_back({-n, op});
    std::sort(ops.begin(), ops.end());
    absl::StrAppend(&out, "  op histogram (", rt.graph->num_live_nodes(), " nodes):\n");
    for (const auto& [n, op] : ops) absl::StrAppend(&out, "    ", op, ": ", -n, "\n");
    absl::StrAppend(&out, "  optimization log: ", rt.log.ToString());
    if (!rt.compression_report.empty()) absl::StrAppend(&out, rt.compression_report);
    // Planned memory for one item: unknown dimensions taken as 1.
    std::vector<Shape> shapes;
    for (const std::string& k : info.input_keys) {
      const TensorInfo& t = info.inputs.at(k);
      Shape s;
      for (int64_t d : t.shape) s.push_back(d < 0 ? 1 : d);
      shapes.push_back(s);
    }
    std::vector<std::string> shape_text;
    for (const Shape& s : shapes) shape_text.push_back(s.ToString());
    auto plan = rt.cache->Get(shapes);
    if (plan.ok()) {
      const exec::PlanStats& st = (*plan)->stats();
      absl::StrAppend(&out, "  planned memory for inputs ", absl::StrJoin(shape_text, ", "),
                      " (unknown dimensions as 1): arena ", st.arena_bytes, " bytes (",
                      st.unshared_bytes, " without reuse), ", st.steps, " steps, ", st.folded_nodes,
                      " folded at compile time, ", st.in_place_outputs, " outputs in place, ",
                      st.activation_reorders, " activation reorders per run, ",
                      st.guarded_activations,
                      " guarded activations (run inside their convolution when its input is "
                      "bounded), compiled in ",
                      st.compile_ns / 1000, " us\n");
      if (threads_.intra > 1) {
        absl::StrAppend(&out, "  threads per step (KILN_THREAD_CHOICE=",
                        exec::ThreadChoiceModeName(st.thread_choice), "): ", st.one_thread_steps,
                        " of ", st.steps, " steps on 1 thread, the others on ", threads_.intra,
                        " (", st.thread_timed_steps, " steps timed, ",
                        st.thread_choice_ns / 1000000, " ms)\n");
      }
    } else {
      absl::StrAppend(&out, "  planned memory: no plan for inputs ",
                      absl::StrJoin(shape_text, ", "), ": ", plan.status().message(), "\n");
    }
    const kernels::PackedConstantCache& packed = rt.cache->packed_constants();
    absl::StrAppend(&out, "  packed weights: ", packed.bytes(), " bytes in ", packed.entries(),
                    " entries, shared by the signature's ", rt.cache->size(), " cached plans (",
                    packed.hits(), " reuses)\n");
  }
  return out;
}

}  // namespace

#ifdef KILN_HAVE_TF_IMPORT
// Whether a model file is a frozen TensorFlow GraphDef rather than an ONNX ModelProto; both
// are ".pb" files in the wild, so the first bytes decide. Protobuf writers emit fields in
// number order: a GraphDef starts with its nodes (field 1, length-delimited: byte 0x0a), a
// ModelProto with ir_version (field 1, a varint: 0x08). A text GraphDef starts with "node".
bool IsFrozenGraphDefFile(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  char head[512];
  file.read(head, sizeof(head));
  absl::string_view bytes(head, static_cast<size_t>(file.gcount()));
  if (bytes.empty()) return false;
  if (bytes[0] == '\x0a') return true;
  // Text format: skip blank space and '#' comment lines.
  while (!bytes.empty()) {
    bytes = absl::StripLeadingAsciiWhitespace(bytes);
    if (!absl::StartsWith(bytes, "#")) break;
    const size_t eol = bytes.find('\n');
    bytes = eol == absl::string_view::npos ? absl::string_view() : bytes.substr(eol + 1);
  }
  return absl::StartsWith(bytes, "node ") || absl::StartsWith(bytes, "node{") ||
         absl::StartsWith(bytes, "node:");
}
#endif

absl::StatusOr<import::ImportedModel> ImportModel(const std::string& path,
                                                  const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(ResolvedModelPath resolved, ResolveModelPath(path));
  if (resolved.format == ModelFormat::kOnnx) {
#ifdef KILN_HAVE_TF_IMPORT
    // Placeholders in, the graph's sinks out (ImportFrozenGraph's defaults).
    if (IsFrozenGraphDefFile(resolved.path)) return import::ImportFrozenGraph(resolved.path);
#endif
#ifdef KILN_HAVE_ONNX_IMPORT
    return import::ImportOnnxFile(resolved.path);
#else
    return absl::UnimplementedError(
        absl::StrCat("cannot load ", resolved.path, ": this build has no ONNX importer"));
#endif
  }
#ifdef KILN_HAVE_TF_IMPORT
  std::vector<std::string> tags;
  for (absl::string_view t : absl::StrSplit(options.tags, ',', absl::SkipEmpty())) {
    tags.emplace_back(absl::StripAsciiWhitespace(t));
  }
  return import::ImportSavedModel(resolved.path, tags);
#else
  return absl::UnimplementedError(absl::StrCat("cannot load SavedModel ", resolved.path,
                                               ": this build has no TensorFlow importer"));
#endif
}

absl::StatusOr<std::shared_ptr<Model>> Model::Load(const std::string& path,
                                                   const ModelOptions& options) {
  KILN_ASSIGN_OR_RETURN(import::ImportedModel imported, ImportModel(path, options));
  auto model = std::make_shared<ModelImpl>();
  KILN_RETURN_IF_ERROR(model->Init(std::move(imported), options));
  return std::shared_ptr<Model>(std::move(model));
}

absl::StatusOr<std::shared_ptr<Model>> Model::FromImported(import::ImportedModel imported,
                                                           const ModelOptions& options) {
  auto model = std::make_shared<ModelImpl>();
  KILN_RETURN_IF_ERROR(model->Init(std::move(imported), options));
  return std::shared_ptr<Model>(std::move(model));
}

}  // namespace kiln::runtime
