#include "nn_dnnl.h"

#include <omp.h>

#include <cmath>

#include "absl/strings/str_cat.h"

namespace kiln::kernels::nn {

using dnnl::algorithm;
using dnnl::memory;

dnnl::engine& CpuEngine() {
  static dnnl::engine* engine = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *engine;
}

dnnl::stream& ThreadStream() {
  thread_local dnnl::stream stream(CpuEngine());
  return stream;
}

memory::dims ToDnnlDims(const Shape& shape) {
  return memory::dims(shape.dims().begin(), shape.dims().end());
}

memory::dims ToDnnlDims(const std::vector<int64_t>& dims) { return memory::dims(dims.begin(), dims.end()); }

memory::format_tag PlainTag(int rank) {
  switch (rank) {
    case 1: return memory::format_tag::a;
    case 2: return memory::format_tag::ab;
    case 3: return memory::format_tag::abc;
    case 4: return memory::format_tag::abcd;
    case 5: return memory::format_tag::abcde;
    case 6: return memory::format_tag::abcdef;
    default: return memory::format_tag::undef;
  }
}

memory::desc PlainDesc(const Shape& shape, memory::data_type type) {
  return memory::desc(ToDnnlDims(shape), type, PlainTag(shape.rank()));
}

namespace {

struct ActivationMapping {
  const char* name;
  algorithm alg;
};

constexpr ActivationMapping kActivations[] = {
    {"Relu", algorithm::eltwise_relu},         {"LeakyRelu", algorithm::eltwise_relu},
    {"Clip", algorithm::eltwise_clip},         {"Sigmoid", algorithm::eltwise_logistic},
    {"Tanh", algorithm::eltwise_tanh},         {"Elu", algorithm::eltwise_elu},
    {"HardSwish", algorithm::eltwise_hardswish}, {"Softplus", algorithm::eltwise_soft_relu},
    {"Gelu", algorithm::eltwise_gelu_erf},     {"GeluTanh", algorithm::eltwise_gelu_tanh},
    {"Exp", algorithm::eltwise_exp},           {"Abs", algorithm::eltwise_abs},
    {"Sqrt", algorithm::eltwise_sqrt},         {"Square", algorithm::eltwise_square},
};

}  // namespace

bool IsSupportedActivation(const std::string& kind) {
  for (const auto& a : kActivations) {
    if (kind == a.name) return true;
  }
  return false;
}

absl::StatusOr<std::vector<PostOp>> ReadPostOps(const ir::Node& node) {
  std::vector<PostOp> ops;
  const std::vector<std::string> kinds = node.GetStrings("post_ops");
  const std::vector<float> alphas = node.GetFloats("post_op_alphas");
  const std::vector<float> betas = node.GetFloats("post_op_betas");
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (kinds[i] != "Add" && !IsSupportedActivation(kinds[i])) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Describe(), ": unsupported fused post-op \"", kinds[i], "\""));
    }
    ops.push_back({kinds[i], i < alphas.size() ? alphas[i] : 0.0f, i < betas.size() ? betas[i] : 0.0f});
  }
  return ops;
}

absl::Status AppendPostOps(const std::vector<PostOp>& post_ops, dnnl::post_ops& ops) {
  for (const PostOp& op : post_ops) {
    if (op.kind == "Add") {
      ops.append_sum(1.0f);
      continue;
    }
    for (const auto& a : kActivations) {
      if (op.kind != a.name) continue;
      float alpha = 0, beta = 0;
      if (op.kind == "LeakyRelu" || op.kind == "Elu") alpha = op.alpha;
      if (op.kind == "Clip") {
        alpha = op.alpha;
        beta = op.beta;
      }
      if (op.kind == "HardSigmoid") {
        alpha = op.alpha;
        beta = op.beta;
      }
      ops.append_eltwise(1.0f, a.alg, alpha, beta);
    }
  }
  return absl::OkStatus();
}

void ApplyActivation(const PostOp& op, float* x, int64_t n) {
  const std::string& k = op.kind;
  if (k == "Relu") {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0 ? x[i] : 0;
  } else if (k == "LeakyRelu") {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= 0 ? x[i] : x[i] * op.alpha;
  } else if (k == "Clip") {
    for (int64_t i = 0; i < n; ++i) x[i] = std::fmin(std::fmax(x[i], op.alpha), op.beta);
  } else if (k == "Sigmoid") {
    for (int64_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
  } else if (k == "Tanh") {
    for (int64_t i = 0; i < n; ++i) x[i] = std::tanh(x[i]);
  } else if (k == "Elu") {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] >= 0 ? x[i] : op.alpha * (std::exp(x[i]) - 1);
  } else if (k == "HardSigmoid") {
    for (int64_t i = 0; i < n; ++i) x[i] = std::fmax(0.0f, std::fmin(1.0f, op.alpha * x[i] + op.beta));
  } else if (k == "HardSwish") {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * std::fmax(0.0f, std::fmin(1.0f, x[i] / 6.0f + 0.5f));
  } else if (k == "Softplus") {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 20 ? x[i] : std::log1p(std::exp(x[i]));
  } else if (k == "Gelu") {
    for (int64_t i = 0; i < n; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.70710678118654752f));
  } else if (k == "GeluTanh") {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      x[i] = 0.5f * v * (1.0f + std::tanh(0.7978845608028654f * (v + 0.044715f * v * v * v)));
    }
  } else if (k == "Exp") {
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
  } else if (k == "Abs") {
    for (int64_t i = 0; i < n; ++i) x[i] = std::fabs(x[i]);
  } else if (k == "Sqrt") {
    for (int64_t i = 0; i < n; ++i) x[i] = std::sqrt(x[i]);
  } else if (k == "Square") {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * x[i];
  }
}

ScopedDnnlThreads::ScopedDnnlThreads(int threads) : previous_(omp_get_max_threads()) {
  omp_set_num_threads(threads < 1 ? 1 : threads);
}

ScopedDnnlThreads::~ScopedDnnlThreads() { omp_set_num_threads(previous_); }

}  // namespace kiln::kernels::nn
