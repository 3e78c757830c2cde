// Recurrent layers with ONNX semantics: LSTM, GRU and RNN (directions forward, reverse and
// bidirectional; sequence_lens; initial states; peepholes; clip; custom activations; layout
// 0 and 1; LSTM input_forget; GRU linear_before_reset).
//
// The input projection of all time steps is one GEMM ([seq*batch, input] x W^T); each step
// then does one [batch, hidden] x R^T GEMM and the gate math. Work memory comes from the
// plan's scratch, so a run allocates nothing.
#include <cmath>
#include <cstring>

#include <oneapi/dnnl/dnnl.h>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"
#include "nn_dnnl.h"

namespace kiln::kernels::nn {
namespace {

enum class Cell { kLstm, kGru, kRnn };

struct Activation {
  std::string name;
  float alpha = 0, beta = 0;
  float operator()(float x) const {
    if (name == "Sigmoid") return 1.0f / (1.0f + std::exp(-x));
    if (name == "Tanh") return std::tanh(x);
    if (name == "Relu") return x > 0 ? x : 0;
    if (name == "LeakyRelu") return x >= 0 ? x : alpha * x;
    if (name == "ThresholdedRelu") return x > alpha ? x : 0;
    if (name == "ScaledTanh") return alpha * std::tanh(beta * x);
    if (name == "HardSigmoid") return std::fmax(0.0f, std::fmin(1.0f, alpha * x + beta));
    if (name == "Elu") return x >= 0 ? x : alpha * (std::exp(x) - 1);
    if (name == "Softsign") return x / (1 + std::fabs(x));
    if (name == "Softplus") return std::log1p(std::exp(x));
    if (name == "Affine") return alpha * x + beta;
    return x;
  }
};

// Default alpha/beta per activation when the node gives none (ONNX's defaults).
Activation MakeActivation(const std::string& name, std::vector<float>& alphas, std::vector<float>& betas,
                          size_t& a_i, size_t& b_i) {
  Activation a{name};
  const bool has_alpha = name == "LeakyRelu" || name == "ThresholdedRelu" || name == "ScaledTanh" ||
                         name == "HardSigmoid" || name == "Elu" || name == "Affine";
  const bool has_beta = name == "ScaledTanh" || name == "HardSigmoid" || name == "Affine";
  if (has_alpha) {
    float def = name == "LeakyRelu" ? 0.01f : name == "HardSigmoid" ? 0.2f : 1.0f;
    a.alpha = a_i < alphas.size() ? alphas[a_i++] : def;
  }
  if (has_beta) {
    float def = name == "HardSigmoid" ? 0.5f : name == "ScaledTanh" ? 1.0f : 0.0f;
    a.beta = b_i < betas.size() ? betas[b_i++] : def;
  }
  return a;
}

void Sgemm(bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  dnnl_sgemm('N', trans_b ? 'T' : 'N', m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
}

class RnnKernel : public OpKernel {
 public:
  RnnKernel(const ir::Node& node, Cell cell) : node_(node), cell_(cell) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (ctx.inputs[i].present() && i != 4 && ctx.inputs[i].dtype != DType::kFloat32) {
        return absl::UnimplementedError(absl::StrCat(node_.Describe(), ": input ", i, " is ",
                                                     DTypeName(ctx.inputs[i].dtype), "; only float is supported"));
      }
    }
    gates_ = cell_ == Cell::kLstm ? 4 : cell_ == Cell::kGru ? 3 : 1;
    layout_ = node_.GetInt("layout", 0);
    const Shape& x = ctx.inputs[0].shape;
    const Shape& w = ctx.inputs[1].shape;
    if (x.rank() != 3 || w.rank() != 3) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": X must be rank 3 and W [num_directions, ",
                                                     gates_, "*hidden, input]; got X ", x.ToString(), ", W ",
                                                     w.ToString()));
    }
    seq_ = layout_ == 0 ? x.dim(0) : x.dim(1);
    batch_ = layout_ == 0 ? x.dim(1) : x.dim(0);
    input_ = x.dim(2);
    hidden_ = node_.GetInt("hidden_size", w.dim(1) / gates_);
    const std::string direction = node_.GetString("direction", "forward");
    dirs_ = direction == "bidirectional" ? 2 : 1;
    reverse_only_ = direction == "reverse";
    if (w.dim(0) != dirs_ || w.dim(1) != gates_ * hidden_ || w.dim(2) != input_) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": W is ", w.ToString(), "; expected [", dirs_,
                                                     ", ", gates_ * hidden_, ", ", input_, "]"));
    }
    clip_ = node_.GetFloat("clip", 0.0f);
    input_forget_ = node_.GetInt("input_forget", 0) != 0;
    linear_before_reset_ = node_.GetInt("linear_before_reset", 0) != 0;
    std::vector<std::string> names = node_.GetStrings("activations");
    std::vector<float> alphas = node_.GetFloats("activation_alpha");
    std::vector<float> betas = node_.GetFloats("activation_beta");
    const std::vector<std::string> defaults =
        cell_ == Cell::kLstm ? std::vector<std::string>{"Sigmoid", "Tanh", "Tanh"}
        : cell_ == Cell::kGru ? std::vector<std::string>{"Sigmoid", "Tanh"}
                              : std::vector<std::string>{"Tanh"};
    if (names.empty()) {
      for (int d = 0; d < dirs_; ++d) names.insert(names.end(), defaults.begin(), defaults.end());
    }
    if (names.size() != defaults.size() * dirs_) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": expected ", defaults.size() * dirs_,
                                                     " activations, got ", names.size()));
    }
    activations_.clear();
    size_t a_i = 0, b_i = 0;
    for (const std::string& n : names) activations_.push_back(MakeActivation(n, alphas, betas, a_i, b_i));

    const int64_t gh = gates_ * hidden_;
    // Scratch: projected inputs for all steps, one step's recurrent product, h and c.
    scratch_x_ = seq_ * batch_ * gh;
    scratch_h_ = batch_ * gh;
    ctx.scratch_bytes = (scratch_x_ + scratch_h_ + 2 * batch_ * hidden_ + batch_ * input_ * seq_) * sizeof(float) + 256;
    ctx.SetNumOutputs(static_cast<int>(node_.outputs.size()));
    for (size_t i = 0; i < node_.outputs.size(); ++i) ctx.output_dtypes[i] = DType::kFloat32;
    if (!node_.outputs.empty()) {
      ctx.output_shapes[0] = layout_ == 0 ? Shape{seq_, dirs_, batch_, hidden_} : Shape{batch_, seq_, dirs_, hidden_};
    }
    for (size_t i = 1; i < node_.outputs.size(); ++i) {
      ctx.output_shapes[i] = layout_ == 0 ? Shape{dirs_, batch_, hidden_} : Shape{batch_, dirs_, hidden_};
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    ScopedDnnlThreads threads(ctx.intra_op_threads);
    auto input = [&](size_t i) -> const Tensor* {
      return i < ctx.inputs.size() && ctx.inputs[i].valid() ? &ctx.inputs[i] : nullptr;
    };
    const Tensor& x = ctx.inputs[0];
    const float* w_all = ctx.inputs[1].data<float>();
    const float* r_all = ctx.inputs[2].data<float>();
    const Tensor* b = input(3);
    const Tensor* lens = input(4);
    const Tensor* h0 = input(5);
    const Tensor* c0 = cell_ == Cell::kLstm ? input(6) : nullptr;
    const Tensor* p = cell_ == Cell::kLstm ? input(7) : nullptr;
    const int64_t gh = gates_ * hidden_;
    float* scratch = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(ctx.scratch) + 63) & ~uintptr_t{63});
    float* gx = scratch;
    float* gr = gx + scratch_x_;
    float* h = gr + scratch_h_;
    float* c = h + batch_ * hidden_;
    float* x_tm = c + batch_ * hidden_;  // time-major copy of X when layout == 1
    auto out = [&](size_t i) -> float* {
      return i < ctx.outputs.size() && ctx.outputs[i].valid() ? ctx.outputs[i].data<float>() : nullptr;
    };
    float* y = out(0);
    float* y_h = out(1);
    float* y_c = cell_ == Cell::kLstm ? out(2) : nullptr;
    if (y) std::memset(y, 0, ctx.outputs[0].byte_size());

    const float* xv = x.data<float>();
    if (layout_ == 1) {
      for (int64_t bi = 0; bi < batch_; ++bi)
        for (int64_t t = 0; t < seq_; ++t)
          std::memcpy(x_tm + (t * batch_ + bi) * input_, xv + (bi * seq_ + t) * input_, input_ * sizeof(float));
      xv = x_tm;
    }
    std::vector<int64_t> seq_len(batch_, seq_);
    if (lens) {
      for (int64_t bi = 0; bi < batch_; ++bi) {
        seq_len[bi] = lens->dtype() == DType::kInt64 ? lens->data<int64_t>()[bi] : lens->data<int32_t>()[bi];
      }
    }
    const size_t acts_per_dir = activations_.size() / dirs_;
    for (int d = 0; d < dirs_; ++d) {
      const bool reverse = reverse_only_ || d == 1;
      const float* w = w_all + d * gh * input_;
      const float* r = r_all + d * gh * hidden_;
      const float* wb = b ? b->data<float>() + d * 2 * gh : nullptr;
      const float* rb = wb ? wb + gh : nullptr;
      const float* peep = p ? p->data<float>() + d * 3 * hidden_ : nullptr;
      const Activation& f = activations_[d * acts_per_dir];
      const Activation& g = activations_[d * acts_per_dir + (acts_per_dir > 1 ? 1 : 0)];
      const Activation& hact = activations_[d * acts_per_dir + (acts_per_dir > 2 ? 2 : 0)];
      // Input projection for every step: gx = X W^T (+ Wb, and + Rb where it is not inside r).
      Sgemm(true, seq_ * batch_, gh, input_, xv, input_, w, input_, 0.0f, gx, gh);
      if (wb) {
        for (int64_t row = 0; row < seq_ * batch_; ++row) {
          float* gxr = gx + row * gh;
          for (int64_t j = 0; j < gh; ++j) {
            const bool rb_inside = cell_ == Cell::kGru && j >= 2 * hidden_;  // GRU's Rbh is applied with r
            gxr[j] += wb[j] + (rb_inside ? 0.0f : rb[j]);
          }
        }
      }
      for (int64_t i = 0; i < batch_ * hidden_; ++i) {
        h[i] = h0 ? h0->data<float>()[d * batch_ * hidden_ + i] : 0.0f;
        c[i] = c0 ? c0->data<float>()[d * batch_ * hidden_ + i] : 0.0f;
      }
      for (int64_t step = 0; step < seq_; ++step) {
        if (cell_ != Cell::kGru || !linear_before_reset_) {
          Sgemm(true, batch_, gh, hidden_, h, hidden_, r, hidden_, 0.0f, gr, gh);
        }
        if (cell_ == Cell::kGru && linear_before_reset_) {
          Sgemm(true, batch_, gh, hidden_, h, hidden_, r, hidden_, 0.0f, gr, gh);
        }
        for (int64_t bi = 0; bi < batch_; ++bi) {
          if (step >= seq_len[bi]) continue;  // finished: state holds, output stays zero
          const int64_t t = reverse ? seq_len[bi] - 1 - step : step;
          const float* xg = gx + (t * batch_ + bi) * gh;
          float* rg = gr + bi * gh;
          float* hb = h + bi * hidden_;
          float* cb = c + bi * hidden_;
          auto clip = [&](float v) { return clip_ > 0 ? std::fmax(-clip_, std::fmin(clip_, v)) : v; };
          if (cell_ == Cell::kLstm) {
            for (int64_t j = 0; j < hidden_; ++j) {
              // Gate order in W/R/B: input, output, forget, cell.
              float gi = clip(xg[j] + rg[j] + (peep ? peep[j] * cb[j] : 0));
              float gf = clip(xg[2 * hidden_ + j] + rg[2 * hidden_ + j] + (peep ? peep[2 * hidden_ + j] * cb[j] : 0));
              float gc = clip(xg[3 * hidden_ + j] + rg[3 * hidden_ + j]);
              const float i_t = f(gi);
              const float f_t = input_forget_ ? 1.0f - i_t : f(gf);
              const float c_t = f_t * cb[j] + i_t * g(gc);
              float go = clip(xg[hidden_ + j] + rg[hidden_ + j] + (peep ? peep[hidden_ + j] * c_t : 0));
              const float o_t = f(go);
              cb[j] = c_t;
              rg[j] = o_t * hact(c_t);  // new h, stored aside until all units are done
            }
            for (int64_t j = 0; j < hidden_; ++j) hb[j] = rg[j];
          } else if (cell_ == Cell::kGru) {
            const float* rbh = rb ? rb + 2 * hidden_ : nullptr;
            float* hnew = rg + 2 * hidden_;  // reuse the recurrent slot after reading it
            for (int64_t j = 0; j < hidden_; ++j) {
              const float z = f(clip(xg[j] + rg[j]));
              const float rr = f(clip(xg[hidden_ + j] + rg[hidden_ + j]));
              float hh;
              if (linear_before_reset_) {
                hh = g(clip(xg[2 * hidden_ + j] + rr * (rg[2 * hidden_ + j] + (rbh ? rbh[j] : 0))));
              } else {
                // (r . H) R_h^T needs r for every unit first: computed below.
                hh = 0;
              }
              rg[j] = z;
              rg[hidden_ + j] = rr;
              if (linear_before_reset_) hnew[j] = hh;
            }
            if (!linear_before_reset_) {
              // rh = (r . H_prev), then ht = g(xg_h + rh R_h^T + Rbh).
              std::vector<float> rh_vec(hidden_), prod(hidden_);
              for (int64_t j = 0; j < hidden_; ++j) rh_vec[j] = rg[hidden_ + j] * hb[j];
              const float* rh_w = r + 2 * hidden_ * hidden_;
              Sgemm(true, 1, hidden_, hidden_, rh_vec.data(), hidden_, rh_w, hidden_, 0.0f, prod.data(), hidden_);
              for (int64_t j = 0; j < hidden_; ++j) {
                hnew[j] = g(clip(xg[2 * hidden_ + j] + prod[j] + (rbh ? rbh[j] : 0)));
              }
            }
            for (int64_t j = 0; j < hidden_; ++j) hb[j] = (1 - rg[j]) * hnew[j] + rg[j] * hb[j];
          } else {
            for (int64_t j = 0; j < hidden_; ++j) hb[j] = f(clip(xg[j] + rg[j]));
          }
          if (y) {
            float* yt = layout_ == 0 ? y + ((t * dirs_ + d) * batch_ + bi) * hidden_
                                     : y + ((bi * seq_ + t) * dirs_ + d) * hidden_;
            std::memcpy(yt, hb, hidden_ * sizeof(float));
          }
        }
      }
      for (int64_t bi = 0; bi < batch_; ++bi) {
        const int64_t off = layout_ == 0 ? (d * batch_ + bi) * hidden_ : (bi * dirs_ + d) * hidden_;
        if (y_h) std::memcpy(y_h + off, h + bi * hidden_, hidden_ * sizeof(float));
        if (y_c) std::memcpy(y_c + off, c + bi * hidden_, hidden_ * sizeof(float));
      }
    }
    return absl::OkStatus();
  }

 private:
  ir::Node node_;
  Cell cell_;
  int gates_ = 4;
  int64_t layout_ = 0, seq_ = 0, batch_ = 0, input_ = 0, hidden_ = 0, dirs_ = 1;
  bool reverse_only_ = false, input_forget_ = false, linear_before_reset_ = false;
  float clip_ = 0;
  std::vector<Activation> activations_;
  int64_t scratch_x_ = 0, scratch_h_ = 0;
};

template <Cell C>
absl::StatusOr<std::unique_ptr<OpKernel>> MakeRnn(const ir::Node& node) {
  return std::unique_ptr<OpKernel>(new RnnKernel(node, C));
}

KILN_REGISTER_KERNEL("", "LSTM", MakeRnn<Cell::kLstm>);
KILN_REGISTER_KERNEL("", "GRU", MakeRnn<Cell::kGru>);
KILN_REGISTER_KERNEL("", "RNN", MakeRnn<Cell::kRnn>);

}  // namespace

KILN_KERNEL_FILE(nn_rnn);

}  // namespace kiln::kernels::nn
