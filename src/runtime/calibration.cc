#include "kiln/runtime/calibration.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/core/thread_pool.h"
#include "kiln/exec/plan.h"

namespace kiln::runtime {
namespace {

// Operators whose float inputs and outputs the int8 passes quantize (compress_conv.cc and the
// dynamic MatMul pass): everything an int8 chain can read, write or pass through.
bool Observed(const ir::Node& node) {
  static const std::set<std::string> kOnnx = {"Conv", "MaxPool", "AveragePool", "GlobalAveragePool",
                                              "Relu", "Clip",    "Add",         "MatMul",
                                              "Gemm", "Concat",  "LeakyRelu"};
  static const std::set<std::string> kKiln = {"FusedConv", "FusedMatMul", "FusedGemm"};
  if (node.domain.empty()) return kOnnx.count(node.op) > 0;
  return node.domain == "kiln" && kKiln.count(node.op) > 0;
}

// Histogram of |x| over [0, range) in a fixed number of bins; the range doubles (merging bin
// pairs) when a larger magnitude arrives, so one pass over the examples is enough.
class AbsHistogram {
 public:
  explicit AbsHistogram(int bins) : bins_(bins, 0), copies_(4 * static_cast<size_t>(bins), 0) {}

  // Two passes over the data, both vectorized: min/max and the largest finite magnitude, then
  // bin indices (a NaN gets a negative one and is skipped); the increments go to four
  // interleaved copies of the bins, so that runs of one bin (the zeros after a Relu) do not
  // wait on each other's stores. About 1 ns per element instead of 6 (ResNet-18 calibration
  // spent more time here than in the network).
  void Add(const float* data, int64_t n) {
    float lo = min_, hi = max_, batch_max = 0;
    int64_t i = 0;
#ifdef __AVX2__
    {
      const __m256 sign = _mm256_set1_ps(-0.0f);
      const __m256 inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
      __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi), vmax = _mm256_setzero_ps();
      for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(data + i);
        // min/max return the second operand when the first is NaN: NaN never gets in.
        vlo = _mm256_min_ps(v, vlo);
        vhi = _mm256_max_ps(v, vhi);
        const __m256 a = _mm256_andnot_ps(sign, v);
        const __m256 finite = _mm256_cmp_ps(a, inf, _CMP_LT_OQ);
        vmax = _mm256_max_ps(_mm256_and_ps(a, finite), vmax);
      }
      alignas(32) float l[8], h[8], m[8];
      _mm256_store_ps(l, vlo);
      _mm256_store_ps(h, vhi);
      _mm256_store_ps(m, vmax);
      for (int k = 0; k < 8; ++k) {
        lo = std::min(lo, l[k]);
        hi = std::max(hi, h[k]);
        batch_max = std::max(batch_max, m[k]);
      }
    }
#endif
    for (; i < n; ++i) {
      const float v = data[i];
      if (std::isnan(v)) continue;  // NaN has no range; it must not poison min/max.
      lo = std::min(lo, v);
      hi = std::max(hi, v);
      // Infinities cannot be binned; they saturate whatever range is chosen.
      if (std::isfinite(v)) batch_max = std::max(batch_max, std::fabs(v));
    }
    min_ = lo;
    max_ = hi;
    if (range_ == 0 && batch_max > 0) range_ = batch_max;
    while (batch_max >= range_ && range_ > 0) Widen();
    const int nb = static_cast<int>(bins_.size());
    const float per_unit = range_ > 0 ? nb / range_ : 0;
    const float last = static_cast<float>(nb - 1);
    constexpr int64_t kChunk = 4096;
    int32_t index[kChunk];
    for (int64_t begin = 0; begin < n; begin += kChunk) {
      const int64_t len = std::min(kChunk, n - begin);
      const float* d = data + begin;
      int64_t j = 0;
#ifdef __AVX2__
      const __m256 sign = _mm256_set1_ps(-0.0f);
      const __m256 scale = _mm256_set1_ps(per_unit), cap = _mm256_set1_ps(last);
      for (; j + 8 <= len; j += 8) {
        const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(d + j));
        // min(cap, x) returns x when x is NaN: truncation then gives INT_MIN (skipped below);
        // an infinity lands in the last bin.
        const __m256 b = _mm256_min_ps(cap, _mm256_mul_ps(a, scale));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(index + j), _mm256_cvttps_epi32(b));
      }
#endif
      for (; j < len; ++j) {
        const float a = std::fabs(d[j]);
        index[j] = std::isnan(a) ? -1 : static_cast<int32_t>(std::min(last, a * per_unit));
      }
      for (j = 0; j < len; ++j) {
        const int32_t b = index[j];
        if (b < 0) continue;
        ++copies_[(j & 3) * nb + b];
        ++count_;
      }
    }
    for (int c = 0; c < 4; ++c) {
      for (int b = 0; b < nb; ++b) {
        bins_[b] += copies_[c * nb + b];
        copies_[c * nb + b] = 0;
      }
    }
  }

  bool empty() const { return count_ == 0; }

  opt::ActivationRange Range(const CalibrationOptions& options) const {
    float threshold = std::max(std::fabs(min_), std::fabs(max_));
    if (range_ > 0) {
      switch (options.method) {
        case CalibrationOptions::Method::kMinMax:
          break;
        case CalibrationOptions::Method::kPercentile:
          threshold = std::min(threshold, PercentileThreshold(options.percentile));
          break;
        case CalibrationOptions::Method::kEntropy:
          threshold = std::min(threshold, EntropyThreshold());
          break;
      }
    }
    opt::ActivationRange r;
    r.min = min_ >= 0 ? 0.0f : std::max(min_, -threshold);
    r.max = std::min(max_, threshold);
    if (max_ < 0) r.max = 0;
    return r;
  }

 private:
  void Widen() {
    const size_t nb = bins_.size();
    for (size_t i = 0; i < nb / 2; ++i) bins_[i] = bins_[2 * i] + bins_[2 * i + 1];
    if (nb % 2) bins_[nb / 2] = bins_[nb - 1];
    std::fill(bins_.begin() + (nb + 1) / 2, bins_.end(), 0);
    range_ *= 2;
  }

  float BinEdge(double bins) const { return static_cast<float>(bins * range_ / bins_.size()); }

  float PercentileThreshold(double percentile) const {
    const double target = static_cast<double>(count_) * percentile / 100.0;
    uint64_t cumulative = 0;
    for (size_t i = 0; i < bins_.size(); ++i) {
      cumulative += bins_[i];
      if (static_cast<double>(cumulative) >= target) return BinEdge(static_cast<double>(i + 1));
    }
    return range_;
  }

  // TensorRT's entropy calibration: for each candidate threshold (bin count i), P is the
  // histogram clipped at i (outliers folded into its last bin) and Q its quantization into
  // 128 levels expanded back over P's non-empty bins; the threshold minimizing KL(P || Q)
  // wins.
  float EntropyThreshold() const {
    constexpr int kLevels = 128;
    const int nb = static_cast<int>(bins_.size());
    int last_nonzero = 0;
    for (int i = 0; i < nb; ++i) {
      if (bins_[i] != 0) last_nonzero = i;
    }
    if (last_nonzero < kLevels) return BinEdge(last_nonzero + 1);
    double best_kl = std::numeric_limits<double>::infinity();
    int best_i = last_nonzero + 1;
    std::vector<double> p, q;
    // Tail sum beyond the candidate, computed once from the right.
    std::vector<double> tail(nb + 1, 0);
    for (int i = nb - 1; i >= 0; --i) tail[i] = tail[i + 1] + static_cast<double>(bins_[i]);
    for (int i = kLevels; i <= last_nonzero + 1; ++i) {
      p.assign(bins_.begin(), bins_.begin() + i);
      p[i - 1] += tail[i];
      q.assign(i, 0);
      const double per_level = static_cast<double>(i) / kLevels;
      for (int level = 0; level < kLevels; ++level) {
        const int begin = static_cast<int>(level * per_level);
        const int end = level == kLevels - 1 ? i : static_cast<int>((level + 1) * per_level);
        double sum = 0;
        int nonzero = 0;
        for (int j = begin; j < end; ++j) {
          sum += static_cast<double>(bins_[j]);
          nonzero += bins_[j] != 0;
        }
        if (nonzero == 0) continue;
        for (int j = begin; j < end; ++j) {
          if (bins_[j] != 0) q[j] = sum / nonzero;
        }
      }
      double p_total = 0, q_total = 0;
      for (int j = 0; j < i; ++j) {
        p_total += p[j];
        q_total += q[j];
      }
      if (p_total == 0 || q_total == 0) continue;
      double kl = 0;
      for (int j = 0; j < i; ++j) {
        if (p[j] == 0) continue;
        const double pj = p[j] / p_total;
        // An empty Q bin where P has mass: TensorRT smooths it with a tiny probability.
        const double qj = q[j] > 0 ? q[j] / q_total : 1e-12;
        kl += pj * std::log(pj / qj);
      }
      if (kl < best_kl) {
        best_kl = kl;
        best_i = i;
      }
    }
    return BinEdge(best_i);
  }

  std::vector<uint64_t> bins_;
  std::vector<uint64_t> copies_;  // Add's four interleaved partial histograms (zero between calls)
  float range_ = 0;               // 0: nothing but zeros so far (everything in bin 0)
  uint64_t count_ = 0;
  float min_ = std::numeric_limits<float>::infinity();
  float max_ = -std::numeric_limits<float>::infinity();
};

// Examples [begin, end) concatenated along dimension 0, in graph input order.
absl::StatusOr<std::vector<Tensor>> Concatenate(
    const ir::Graph& graph, absl::Span<const std::map<std::string, Tensor>> examples, size_t begin,
    size_t end) {
  std::vector<Tensor> batch;
  for (ir::ValueId input : graph.inputs) {
    const std::string& name = graph.value(input).name;
    const Tensor& first = examples[begin].at(name);
    if (end - begin == 1) {
      batch.push_back(first);
      continue;
    }
    Shape shape = first.shape();
    int64_t rows = 0;
    for (size_t e = begin; e < end; ++e) rows += examples[e].at(name).dim(0);
    shape.set_dim(0, rows);
    Tensor joined(first.dtype(), shape);
    char* out = static_cast<char*>(joined.raw_data());
    for (size_t e = begin; e < end; ++e) {
      const Tensor& t = examples[e].at(name);
      std::memcpy(out, t.raw_data(), t.byte_size());
      out += t.byte_size();
    }
    batch.push_back(std::move(joined));
  }
  return batch;
}

// Whether example `e` can join a batch that starts with example `first`: same dtypes and the
// same dimensions but the first, for every input.
bool Joinable(const ir::Graph& graph, const std::map<std::string, Tensor>& first,
              const std::map<std::string, Tensor>& e) {
  for (ir::ValueId input : graph.inputs) {
    const std::string& name = graph.value(input).name;
    const Tensor& a = first.at(name);
    const Tensor& b = e.at(name);
    if (a.dtype() != b.dtype() || a.dtype() == DType::kString || a.rank() == 0 ||
        a.rank() != b.rank()) {
      return false;
    }
    for (int d = 1; d < a.rank(); ++d) {
      if (a.dim(d) != b.dim(d)) return false;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<absl::flat_hash_map<std::string, opt::ActivationRange>> CollectActivationRanges(
    const ir::Graph& graph, absl::Span<const std::map<std::string, Tensor>> examples,
    const CalibrationOptions& options, std::vector<std::vector<Tensor>>* graph_outputs) {
  if (graph_outputs != nullptr) graph_outputs->clear();
  if (options.num_bins < 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration num_bins must be at least 256, is ", options.num_bins));
  }
  if (options.method == CalibrationOptions::Method::kPercentile &&
      !(options.percentile > 0 && options.percentile <= 100)) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration percentile must be in (0, 100], is ", options.percentile));
  }
  for (size_t e = 0; e < examples.size(); ++e) {
    for (ir::ValueId input : graph.inputs) {
      const ir::Value& v = graph.value(input);
      auto it = examples[e].find(v.name);
      if (it == examples[e].end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("calibration example ", e, " has no input '", v.name, "'"));
      }
      if (v.type.dtype != DType::kInvalid && it->second.dtype() != v.type.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(
            "calibration example ", e, ": input '", v.name, "' is ", DTypeName(it->second.dtype()),
            ", the model takes ", DTypeName(v.type.dtype)));
      }
    }
  }

  // The graph to run: every observed value becomes an output. Values between convolutions
  // keep the layout the optimizer chose (nhwc, nChw8c, nChw16c), and the plan returns their
  // bytes as they are: ir::Verify would refuse such an output, since a caller would read it as
  // NCHW, but a range does not depend on the order of the elements, and these layouts are
  // only chosen where the channels fill every block (no padding bytes). Resetting them to
  // plain instead made every convolution reorder its input and output, which took calibration
  // from the fp32 model's speed to 2.4x slower (ResNet-18, AVX-512).
  auto observed = std::make_shared<ir::Graph>(graph);
  KILN_RETURN_IF_ERROR(ir::InferShapes(*observed));
  std::set<ir::ValueId> wanted;
  for (const ir::Node& node : observed->nodes()) {
    if (node.removed || !Observed(node)) continue;
    for (ir::ValueId v : node.inputs) {
      if (v != ir::kNoValue && !observed->IsConstant(v)) wanted.insert(v);
    }
    for (ir::ValueId v : node.outputs) {
      if (v != ir::kNoValue) wanted.insert(v);
    }
  }
  const std::set<ir::ValueId> inputs(observed->inputs.begin(), observed->inputs.end());
  std::vector<ir::ValueId> observed_values;  // in the order of the added outputs
  const size_t first_added = observed->outputs.size();
  std::vector<int> output_of(observed->num_values(), -1);
  for (size_t i = 0; i < observed->outputs.size(); ++i) output_of[observed->outputs[i]] = i;
  for (ir::ValueId v : wanted) {
    const DType dtype = observed->value(v).type.dtype;
    if (dtype != DType::kFloat32 && dtype != DType::kInvalid) continue;
    observed_values.push_back(v);
    if (inputs.count(v) || output_of[v] >= 0) continue;
    output_of[v] = static_cast<int>(observed->outputs.size());
    observed->outputs.push_back(v);
  }
  (void)first_added;
  std::vector<int> input_index(observed->num_values(), -1);
  for (size_t i = 0; i < observed->inputs.size(); ++i) input_index[observed->inputs[i]] = i;

  std::vector<AbsHistogram> histograms(observed_values.size(), AbsHistogram(options.num_bins));
  exec::CompileOptions compile;
  if (options.compile.has_value()) {
    compile = *options.compile;
    // The observed graph is another graph than the one these caches were made for.
    compile.packed_constants = nullptr;
    compile.created_kernels = nullptr;
  } else {
    compile.intra_op_threads = std::max(1, options.intra_op_threads);
    compile.intra_op_openmp = compile.intra_op_threads > 1;
  }
  const int threads = std::max(1, options.compile.has_value() ? options.compile->intra_op_threads
                                                              : options.intra_op_threads);
  std::unique_ptr<ThreadPool> histogram_pool;
  if (threads > 1) histogram_pool = std::make_unique<ThreadPool>(threads - 1, "kiln-calib");
  const size_t num_graph_outputs = graph.outputs.size();
  bool outputs_sliceable = true;
  // Plans by input dimensions (Shape has no ordering of its own).
  std::map<std::vector<std::vector<int64_t>>, std::shared_ptr<exec::CompiledPlan>> plans;
  std::vector<Tensor> outputs;
  const size_t batch_size = static_cast<size_t>(std::max(1, options.batch_size));
  for (size_t begin = 0; begin < examples.size();) {
    size_t end = begin + 1;
    while (end < examples.size() && end - begin < batch_size &&
           Joinable(graph, examples[begin], examples[end])) {
      ++end;
    }
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> batch, Concatenate(graph, examples, begin, end));
    std::vector<Shape> shapes;
    std::vector<std::vector<int64_t>> key;
    for (const Tensor& t : batch) {
      shapes.push_back(t.shape());
      key.emplace_back(t.shape().dims().begin(), t.shape().dims().end());
    }
    auto& plan = plans[key];
    if (plan == nullptr) {
      KILN_ASSIGN_OR_RETURN(plan, exec::CompiledPlan::Compile(observed, shapes, compile));
    }
    KILN_RETURN_IF_ERROR(Annotate(plan->Run(batch, &outputs),
                                  absl::StrCat("calibration examples ", begin, "..", end - 1)));
    if (graph_outputs != nullptr && outputs_sliceable) {
      // The graph's outputs (the first ones of `observed`) per example. A copy of the tensor
      // handle keeps the bytes: the next run writes those outputs into fresh tensors (Run
      // reuses only tensors nobody else holds).
      int64_t rows = 0;
      for (size_t e = begin; e < end; ++e) {
        const std::vector<Tensor> one(outputs.begin(), outputs.begin() + num_graph_outputs);
        if (end - begin == 1) {
          graph_outputs->push_back(one);
          continue;
        }
        if (graph.inputs.empty()) {
          outputs_sliceable = false;
          break;
        }
        const int64_t n = examples[e].at(graph.value(graph.inputs[0]).name).dim(0);
        std::vector<Tensor> sliced;
        for (const Tensor& t : one) {
          if (t.rank() == 0 || t.dim(0) != batch[0].dim(0)) {
            outputs_sliceable = false;
            break;
          }
          sliced.push_back(t.Slice(rows, rows + n));
        }
        rows += n;
        graph_outputs->push_back(std::move(sliced));
      }
    }
    // Each value's histogram on whichever thread is free, largest values first: ResNet-18's
    // histograms took 60 ms per 25 images on one thread, a sixth of the fp32 run's time.
    std::vector<size_t> by_size(observed_values.size());
    for (size_t k = 0; k < by_size.size(); ++k) by_size[k] = k;
    auto tensor_of = [&](size_t k) -> const Tensor& {
      const ir::ValueId v = observed_values[k];
      return input_index[v] >= 0 ? batch[input_index[v]] : outputs[output_of[v]];
    };
    std::stable_sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
      return tensor_of(a).num_elements() > tensor_of(b).num_elements();
    });
    std::atomic<size_t> next{0};
    auto add = [&](int64_t, int64_t) {
      for (size_t i = next++; i < by_size.size(); i = next++) {
        const Tensor& t = tensor_of(by_size[i]);
        if (t.dtype() == DType::kFloat32)
          histograms[by_size[i]].Add(t.data<float>(), t.num_elements());
      }
    };
    if (histogram_pool != nullptr) {
      histogram_pool->ParallelFor(histogram_pool->num_threads() + 1, 1, add);
    } else {
      add(0, 1);
    }
    begin = end;
  }

  if (graph_outputs != nullptr && !outputs_sliceable) graph_outputs->clear();
  absl::flat_hash_map<std::string, opt::ActivationRange> ranges;
  for (size_t k = 0; k < observed_values.size(); ++k) {
    if (histograms[k].empty()) continue;
    ranges[observed->value(observed_values[k]).name] = histograms[k].Range(options);
  }
  return ranges;
}

}  // namespace kiln::runtime
