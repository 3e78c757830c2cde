// kiln::FusedConvDepthwise (include/kiln/ir/fused_post_ops.h; written by
// src/opt/fuse_depthwise.cc): a 1x1 convolution with its Clip, then a depthwise 3x3 convolution
// with its Relu/Clip, as one oneDNN convolution with a depthwise post-op, so the 1x1's output
// never goes to memory.
//
// Both activations run inside oneDNN there, which computes Relu and Clip like Kiln only when
// no sum is NaN (ir/fused_post_ops.h). So the fused primitive runs when this run's input keeps
// every sum finite (nn_dnnl.h's GuardedActivation, for the 1x1; the Clip then bounds what the
// depthwise sums read), and the two convolutions run apart otherwise, each followed by its
// activation in Kiln's vector loops through a scratch copy of the 1x1's output: what the
// unfused nodes compute.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/kernels/kernel.h"
#include "nn_dnnl.h"
#include "nn_dnnl_run_state.h"

namespace kiln::kernels::nn {
namespace {

using dnnl::memory;

constexpr int kX = 0, kW = 1, kBias = 2, kDepthwiseW = 3, kDepthwiseBias = 4;

class ConvDepthwiseKernel : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

 private:
  absl::Status ReadAttributes() {
    KILN_ASSIGN_OR_RETURN(expand_ops_, ReadPostOps(node_));
    if (expand_ops_.size() != 1 || expand_ops_[0].kind != "Clip") {
      return Error("the 1x1 convolution's post-op must be one Clip");
    }
    depthwise_ops_ = ir::GetPostOps(node_, ir::kDepthwisePrefix);
    if (depthwise_ops_.size() > 1 ||
        (depthwise_ops_.size() == 1 && depthwise_ops_[0].kind != "Relu" &&
         depthwise_ops_[0].kind != "Clip")) {
      return Error("the depthwise convolution's post-op must be none, one Relu or one Clip");
    }
    stride_ = node_.GetInt(ir::kDepthwiseStrideAttr, 1);
    if (stride_ != 1 && stride_ != 2) return Error("depthwise_stride must be 1 or 2");
    return absl::OkStatus();
  }

  absl::Status CreateImpl(CreateContext&) override { return ReadAttributes(); }

  template <typename... Args>
  absl::Status Error(const Args&... args) const {
    return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": ", args...));
  }

  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(ReadAttributes());
    if (ctx.inputs.size() != 5) return Error("needs 5 inputs (X, W, B, W_dw, B_dw)");
    for (int i : {kX, kW, kBias, kDepthwiseW, kDepthwiseBias}) {
      if (ctx.inputs[i].present() && ctx.inputs[i].dtype != DType::kFloat32) {
        return Error("input ", i, " must be float");
      }
    }
    const InputInfo& x = ctx.inputs[kX];
    const InputInfo& w = ctx.inputs[kW];
    const InputInfo& w_dw = ctx.inputs[kDepthwiseW];
    if (!x.present() || w.constant == nullptr || w_dw.constant == nullptr) {
      return Error("needs X and constant weights");
    }
    if (x.shape.rank() != 4 || w.shape.rank() != 4 || w.shape.dim(1) != x.shape.dim(1) ||
        w.shape.dim(2) != 1 || w.shape.dim(3) != 1) {
      return Error("X ", x.shape.ToString(), " and W ", w.shape.ToString(),
                   " are not a 2-D 1x1 convolution");
    }
    const int64_t n = x.shape.dim(0), c = x.shape.dim(1), h = x.shape.dim(2), wd = x.shape.dim(3);
    const int64_t m = w.shape.dim(0);
    if (w_dw.shape != Shape{m, 1, 3, 3}) {
      return Error("W_dw ", w_dw.shape.ToString(), " is not [", m, ", 1, 3, 3]");
    }
    for (int i : {kBias, kDepthwiseBias}) {
      if (ctx.inputs[i].present() &&
          (ctx.inputs[i].constant == nullptr || ctx.inputs[i].shape.num_elements() != m)) {
        return Error("bias ", i, " must be a constant of ", m, " floats");
      }
    }
    if (c <= 0 || m <= 0) return Error("weights without channels");  // the pass refuses these
    has_bias_ = ctx.inputs[kBias].present();
    has_depthwise_bias_ = ctx.inputs[kDepthwiseBias].present();
    const Shape mid_shape{n, m, h, wd};
    // Pads 1 and a 3x3 window: ceil(size / stride) outputs, none for an empty input.
    const Shape out_shape{n, m, (h + stride_ - 1) / stride_, (wd + stride_ - 1) / stride_};
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = out_shape;
    // An empty batch (or image) has nothing to compute, and oneDNN's primitive creation
    // divides by these dimensions.
    empty_ = out_shape.num_elements() == 0;
    if (empty_) {
      ctx.scratch_bytes = 0;
      return absl::OkStatus();
    }

    user_x_desc_ = LayoutDesc(x.shape, x.layout);
    user_y_desc_ = LayoutDesc(out_shape, ctx.output_layout(0));
    bias_desc_ = memory::desc({m}, memory::data_type::f32, memory::format_tag::a);
    const memory::desc w_user({m, c, 1, 1}, memory::data_type::f32, memory::format_tag::oihw);
    const memory::desc w_dw_user({m, 1, 1, 3, 3}, memory::data_type::f32,
                                 memory::format_tag::goihw);
    const memory::desc w_any({m, c, 1, 1}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc w_dw_any({m, 1, 1, 3, 3}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc no_bias;
    auto& engine = CpuEngine();
    const ir::Node& key = ctx.node != nullptr ? *ctx.node : node_;
    auto pack = [&](const memory::desc& user, const InputInfo& in, const memory::desc& chosen) {
      return PackConstant(ctx.packed_constants, key, user, in.constant->raw_data(), chosen);
    };
    dnnl::primitive_attr plain_attr;
    plain_attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    const ir::PostOp& clip = expand_ops_[0];

    // The two convolutions apart, with their activations left to the epilogue: always built,
    // they are the path of every run the guard refuses.
    const dnnl::convolution_forward::primitive_desc expand_pd(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, user_x_desc_,
            w_any, has_bias_ ? bias_desc_ : no_bias,
            memory::desc(ToDnnlDims(mid_shape), memory::data_type::f32, memory::format_tag::any),
            {1, 1}, {0, 0}, {0, 0}),
        plain_attr, engine);
    mid_desc_ = expand_pd.dst_desc();
    const dnnl::convolution_forward::primitive_desc depthwise_pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_direct, mid_desc_, w_dw_any,
                                        has_depthwise_bias_ ? bias_desc_ : no_bias, user_y_desc_,
                                        {stride_, stride_}, {1, 1}, {1, 1}),
        plain_attr, engine);
    if (depthwise_pd.src_desc() != mid_desc_ || depthwise_pd.dst_desc() != user_y_desc_ ||
        expand_pd.src_desc() != user_x_desc_) {
      return absl::UnimplementedError(
          absl::StrCat(node_.Describe(), ": oneDNN wants other layouts than the plan's"));
    }
    expand_ = dnnl::convolution_forward(expand_pd);
    depthwise_ = dnnl::convolution_forward(depthwise_pd);
    expand_scratch_desc_ = expand_pd.scratchpad_desc();
    depthwise_scratch_desc_ = depthwise_pd.scratchpad_desc();
    KILN_ASSIGN_OR_RETURN(expand_w_, pack(w_user, w, expand_pd.weights_desc()));
    KILN_ASSIGN_OR_RETURN(depthwise_w_, pack(w_dw_user, w_dw, depthwise_pd.weights_desc()));
    size_t scratch = std::max(expand_scratch_desc_.get_size(), depthwise_scratch_desc_.get_size());

    // The fused primitive, where the guard can hold: the 1x1's input limit from its weights,
    // and the depthwise sums of values within the Clip's bounds finite (PlanGuardedActivation
    // sizes that limit the same way for any activation; Relu stands in when there is none).
    fused_ = dnnl::primitive();
    guard_ = GuardedActivation();
    const GuardedActivation expand_guard =
        PlanGuardedActivation(expand_ops_, w.constant->data<float>(), m, c,
                              has_bias_ ? ctx.inputs[kBias].constant->data<float>() : nullptr);
    const GuardedActivation depthwise_guard = PlanGuardedActivation(
        depthwise_ops_.empty() ? std::vector<PostOp>{PostOp{"Relu"}} : depthwise_ops_,
        w_dw.constant->data<float>(), m, 9,
        has_depthwise_bias_ ? ctx.inputs[kDepthwiseBias].constant->data<float>() : nullptr);
    if (expand_guard.usable && depthwise_guard.usable &&
        expand_guard.output_bound <= depthwise_guard.input_limit) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, clip.alpha, clip.beta);
      ops.append_dw(memory::data_type::f32, memory::data_type::f32, memory::data_type::f32, 3,
                    stride_, 1, 0, {});
      if (!depthwise_ops_.empty()) {
        ops.append_eltwise(1.0f, depthwise_guard.alg, depthwise_guard.alpha, depthwise_guard.beta);
      }
      dnnl::primitive_attr attr = plain_attr;
      attr.set_post_ops(ops);
      try {
        const dnnl::convolution_forward::primitive_desc pd(
            dnnl::convolution_forward::desc(
                dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                user_x_desc_, w_any, has_bias_ ? bias_desc_ : no_bias,
                LayoutDesc(mid_shape, ctx.output_layout(0)), {1, 1}, {0, 0}, {0, 0}),
            attr, engine);
        if (pd.src_desc() == user_x_desc_ && pd.dst_desc() == user_y_desc_) {
          fused_scratch_desc_ = pd.scratchpad_desc();
          KILN_ASSIGN_OR_RETURN(fused_w_, pack(w_user, w, pd.weights_desc()));
          KILN_ASSIGN_OR_RETURN(fused_depthwise_w_,
                                pack(w_dw_user, w_dw,
                                     pd.query_md(dnnl::query::exec_arg_md,
                                                 DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS)));
          fused_depthwise_bias_desc_ =
              pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS);
          fused_ = dnnl::convolution_forward(pd);
          scratch = std::max(scratch, fused_scratch_desc_.get_size());
          guard_ = expand_guard;
          guard_.output_bound = depthwise_ops_.empty() ? std::numeric_limits<float>::infinity()
                                                       : depthwise_guard.output_bound;
          // The depthwise post-op always adds a bias: zeros where the model has none.
          zero_bias_.assign(m, 0.0f);
        }
      } catch (const dnnl::error&) {
        // No fused implementation for this shape: the two convolutions apart on every run.
      }
    }
    scratchpad_offset_ = 0;
    mid_offset_ = Align64(scratch);
    ctx.scratch_bytes = mid_offset_ + Align64(mid_desc_.get_size());
    ctx.guarded_activations = guard_.usable ? 1 : 0;
    ctx.activation_reorders = 0;
    return absl::OkStatus();
  }

  struct RunState : KernelRunState {
    DnnlMemory x, y, mid, bias, depthwise_bias, fused_depthwise_bias;
    DnnlMemory expand_scratch, depthwise_scratch, fused_scratch;
    DnnlCall expand, depthwise, fused;
  };

  std::unique_ptr<RunState> MakeRunState() const {
    auto s = std::make_unique<RunState>();
    s->x = DnnlMemory(user_x_desc_);
    s->y = DnnlMemory(user_y_desc_);
    s->mid = DnnlMemory(mid_desc_);
    if (has_bias_) s->bias = DnnlMemory(bias_desc_);
    if (has_depthwise_bias_) s->depthwise_bias = DnnlMemory(bias_desc_);
    s->expand_scratch = DnnlMemory(expand_scratch_desc_);
    s->depthwise_scratch = DnnlMemory(depthwise_scratch_desc_);
    s->expand = DnnlCall({{DNNL_ARG_SRC, s->x.get()},
                          {DNNL_ARG_WEIGHTS, expand_w_->get()},
                          {DNNL_ARG_BIAS, s->bias.get()},
                          {DNNL_ARG_DST, s->mid.get()},
                          {DNNL_ARG_SCRATCHPAD, s->expand_scratch.get()}});
    s->depthwise = DnnlCall({{DNNL_ARG_SRC, s->mid.get()},
                             {DNNL_ARG_WEIGHTS, depthwise_w_->get()},
                             {DNNL_ARG_BIAS, s->depthwise_bias.get()},
                             {DNNL_ARG_DST, s->y.get()},
                             {DNNL_ARG_SCRATCHPAD, s->depthwise_scratch.get()}});
    if (guard_.usable) {
      s->fused_depthwise_bias = DnnlMemory(fused_depthwise_bias_desc_);
      s->fused_scratch = DnnlMemory(fused_scratch_desc_);
      s->fused =
          DnnlCall({{DNNL_ARG_SRC, s->x.get()},
                    {DNNL_ARG_WEIGHTS, fused_w_->get()},
                    {DNNL_ARG_BIAS, s->bias.get()},
                    {DNNL_ARG_DST, s->y.get()},
                    {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_WEIGHTS, fused_depthwise_w_->get()},
                    {DNNL_ARG_ATTR_POST_OP_DW | DNNL_ARG_BIAS, s->fused_depthwise_bias.get()},
                    {DNNL_ARG_SCRATCHPAD, s->fused_scratch.get()}});
    }
    return s;
  }

 public:
  std::unique_ptr<KernelRunState> NewRunState() const override {
    if (empty_) return nullptr;
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

 private:
  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    if (empty_) return absl::OkStatus();
    ScopedDnnlThreads threads(ctx.intra_op_threads);
    auto& stream = ThreadStream();
    char* scratch = static_cast<char*>(ctx.scratch);
    const Tensor& x = ctx.inputs[kX];
    Tensor& y = ctx.outputs[0];
    std::unique_ptr<RunState> owned;
    const RunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });
    s.x.Point(x.raw_data());
    s.y.Point(y.raw_data());
    if (has_bias_) s.bias.Point(ctx.inputs[kBias].raw_data());
    const float* depthwise_bias =
        has_depthwise_bias_ ? ctx.inputs[kDepthwiseBias].data<float>() : zero_bias_.data();
    // Fused when this run's input cannot make a 1x1 sum NaN: known from the plan, or read here.
    const bool fused =
        guard_.usable &&
        ((!ctx.input_bounds.empty() && ctx.input_bounds[0] <= guard_.input_limit) ||
         InputWithinLimit(x.data<float>(), x.num_elements(), guard_.input_limit, ctx));
    if (guard_.usable) CountGuardedActivationRun(fused);
    if (fused) {
      s.fused_depthwise_bias.Point(depthwise_bias);
      s.fused_scratch.Point(scratch + scratchpad_offset_);
      s.fused.Execute(fused_, stream);
      stream.wait();
      if (!ctx.output_bounds.empty()) ctx.output_bounds[0] = guard_.output_bound;
      return absl::OkStatus();
    }
    float* mid = reinterpret_cast<float*>(scratch + mid_offset_);
    s.mid.Point(mid);
    s.expand_scratch.Point(scratch + scratchpad_offset_);
    s.expand.Execute(expand_, stream);
    stream.wait();
    ApplyEpilogue(expand_ops_, mid, static_cast<int64_t>(mid_desc_.get_size() / sizeof(float)),
                  ctx);
    if (has_depthwise_bias_) s.depthwise_bias.Point(depthwise_bias);
    s.depthwise_scratch.Point(scratch + scratchpad_offset_);
    s.depthwise.Execute(depthwise_, stream);
    stream.wait();
    ApplyEpilogue(depthwise_ops_, y.data<float>(), y.num_elements(), ctx);
    return absl::OkStatus();
  }

  std::vector<PostOp> expand_ops_, depthwise_ops_;
  int64_t stride_ = 1;
  bool empty_ = false;  // no output elements: nothing runs
  bool has_bias_ = false, has_depthwise_bias_ = false;
  memory::desc user_x_desc_, user_y_desc_, mid_desc_, bias_desc_, fused_depthwise_bias_desc_;
  memory::desc expand_scratch_desc_, depthwise_scratch_desc_, fused_scratch_desc_;
  size_t scratchpad_offset_ = 0, mid_offset_ = 0;
  dnnl::primitive expand_, depthwise_, fused_;
  std::shared_ptr<const dnnl::memory> expand_w_, depthwise_w_, fused_w_, fused_depthwise_w_;
  GuardedActivation guard_;  // usable: fused_ exists
  std::vector<float> zero_bias_;
};

KILN_REGISTER_KERNEL(ir::kKilnDomain, ir::kFusedConvDepthwiseOp,
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new ConvDepthwiseKernel(node));
                     });

}  // namespace

KILN_KERNEL_FILE(nn_conv_depthwise);

}  // namespace kiln::kernels::nn
