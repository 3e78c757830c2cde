// Kiln's int8 operators (include/kiln/ir/int8_ops.h) on oneDNN's int8 primitives: Int8Conv
// (u8s8 or s8s8 convolution, int32 accumulation, per-output-channel output scales, the
// requantization to the next int8 value fused, residual sum and Relu/Clip as post-ops),
// Int8Pool, and the border reorders Int8Quantize / Int8Dequantize.
//
// Int8 values are channels-last by contract, the layout oneDNN's int8 kernels read and write,
// so only the float borders reorder. Weights arrive quantized (int8 constants) and are packed
// into the primitive's layout once per model (PackConstant, shared by every plan).
//
// oneDNN (v2) computes, per output element of channel c:
//   d = (sum (x - x_zp) * w + bias_q[c]) * out_scale[c];  post-ops on d;  y = sat(rint(d) + y_zp)
// so the kernel hands it bias_q = B / (x_scale * w_scale) and
// out_scale = x_scale * w_scale / y_scale (y_scale = 1 for a float output); Clip bounds are
// divided by y_scale as well, since post-ops see d in units of the output's steps.
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/conv_geometry.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/int8_ops.h"
#include "kiln/kernels/compressed_matmul.h"  // CpuHasInt8Vnni
#include "kiln/kernels/kernel.h"
#include "nn_dnnl.h"
#include "nn_dnnl_run_state.h"

namespace kiln::kernels::nn {
namespace {

using dnnl::memory;

bool IsInt8(DType d) { return d == DType::kUInt8 || d == DType::kInt8; }

memory::data_type DnnlType(DType d) {
  switch (d) {
    case DType::kUInt8:
      return memory::data_type::u8;
    case DType::kInt8:
      return memory::data_type::s8;
    case DType::kInt32:
      return memory::data_type::s32;
    default:
      return memory::data_type::f32;
  }
}

// The [N, C, H, W] descriptor of channels-last bytes.
memory::desc NhwcDesc(int64_t n, int64_t c, int64_t h, int64_t w, DType dtype) {
  return memory::desc({n, c, h, w}, DnnlType(dtype), memory::format_tag::nhwc);
}

struct Window2D {
  int64_t out_h = 0, out_w = 0;
  memory::dims strides, kernel, dilations, pads_begin, pads_end;
};

// ONNX's window rule for both spatial axes (ir::WindowOutputAxis); pads_end are what oneDNN
// needs to produce exactly out_h x out_w (ceil_mode grows them).
absl::StatusOr<Window2D> ComputeWindow(const ir::Node& node, int64_t in_h, int64_t in_w,
                                       int64_t k_h, int64_t k_w, bool pool) {
  Window2D g;
  const std::vector<int64_t> strides = node.GetInts("strides", {1, 1});
  const std::vector<int64_t> dilations = node.GetInts("dilations", {1, 1});
  const std::vector<int64_t> pads = node.GetInts("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": strides, dilations and pads must describe 2 axes"));
  }
  const std::string auto_pad_name = node.GetString("auto_pad", "NOTSET");
  const std::optional<ir::AutoPad> auto_pad = ir::ParseAutoPad(auto_pad_name);
  if (!auto_pad.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": unknown auto_pad '", auto_pad_name, "'"));
  }
  const bool ceil_mode = pool && node.GetInt("ceil_mode", 0) != 0;
  const int64_t in[2] = {in_h, in_w}, k[2] = {k_h, k_w};
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    if (strides[i] < 1 || dilations[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Describe(), ": strides and dilations must be positive"));
    }
    const ir::WindowAxis axis = ir::WindowOutputAxis(in[i], k[i], strides[i], dilations[i], pads[i],
                                                     pads[2 + i], *auto_pad, ceil_mode);
    if (axis.out <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": input ", in_h, "x", in_w,
                                                     " is too small for the window"));
    }
    out[i] = axis.out;
    const int64_t k_eff = (k[i] - 1) * dilations[i] + 1;
    g.strides.push_back(strides[i]);
    g.kernel.push_back(k[i]);
    g.dilations.push_back(dilations[i] - 1);  // oneDNN counts dilation from 0
    g.pads_begin.push_back(axis.pad_begin);
    g.pads_end.push_back((axis.out - 1) * strides[i] + k_eff - in[i] - axis.pad_begin);
  }
  g.out_h = out[0];
  g.out_w = out[1];
  return g;
}

class Int8ConvKernel : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

 private:
  // Once per node per model: the attributes no shape changes, then the int8 weights packed
  // into the layout oneDNN picks for the input shape the graph records (batch 1 where it is
  // open), shared by the plans whose primitive picks the same (PrimitiveWeights).
  absl::Status CreateImpl(CreateContext& ctx) override {
    if (ir::Int8TypeFromName(node_.GetString("out_type", "float")) == DType::kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": out_type must be uint8, int8 or float"));
    }
    if (node_.GetInt("group", 1) < 1) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": group must be positive"));
    }
    for (float scale : node_.GetFloats("w_scales")) {
      if (!(scale > 0) || !std::isfinite(scale)) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": w_scales must be positive and finite"));
      }
    }
    const std::vector<ir::PostOp> post_ops = ir::GetPostOps(node_);
    for (size_t i = 0; i < post_ops.size(); ++i) {
      const std::string& kind = post_ops[i].kind;
      if (kind == ir::kResidualPostOp && i != 0) {
        return absl::UnimplementedError(
            absl::StrCat(node_.Describe(), ": the residual Add must be the first post-op"));
      }
      if (kind != ir::kResidualPostOp && kind != "Relu" && kind != "LeakyRelu" && kind != "Clip") {
        return absl::UnimplementedError(
            absl::StrCat(node_.Describe(), ": post-op ", kind, " has no int8 form"));
      }
    }
    if (ctx.inputs.size() < 2 || ctx.inputs[1].constant == nullptr ||
        ctx.inputs[0].shape.rank() != 4) {
      return absl::OkStatus();  // nothing to pack, or no shape to choose the layout for
    }
    Shape x_shape = ctx.inputs[0].shape;
    if (x_shape.dim(0) <= 0) x_shape.set_dim(0, 1);
    for (int i = 1; i < 4; ++i) {
      if (x_shape.dim(i) <= 0) return absl::OkStatus();  // Reshape packs for the plan's shape
    }
    const absl::Status packed = ReshapeForCreate(ctx, x_shape, &creating_,
                                                 [&](ReshapeContext& c) { return ReshapeImpl(c); });
    // Not a shape the plans will have: Reshape reports it, or packs for the plan's shape.
    if (!packed.ok()) w_ = PrimitiveWeights();
    return absl::OkStatus();
  }

  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    const Int8ConvKernel* created = static_cast<const Int8ConvKernel*>(ctx.created);
    const std::vector<ir::PostOp> post_ops = ir::GetPostOps(node_);
    const bool has_residual = ir::HasResidual(node_);
    if (ctx.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs X and W"));
    }
    const InputInfo& x = ctx.inputs[0];
    const InputInfo& w = ctx.inputs[1];
    residual_index_ = has_residual ? static_cast<int>(ctx.inputs.size()) - 1 : -1;
    has_bias_ = ctx.inputs.size() > 2 && ctx.inputs[2].present() && 2 != residual_index_;
    if (!IsInt8(x.dtype) || x.shape.rank() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": X must be uint8 or ",
                                                     "int8 [N,H,W,C], is ", DTypeName(x.dtype),
                                                     x.shape.ToString()));
    }
    if (w.dtype != DType::kInt8 || w.shape.rank() != 4) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": W must be int8 ",
                                                     "[M,C/group,kH,kW], is ", DTypeName(w.dtype),
                                                     w.shape.ToString()));
    }
    out_type_ = ir::Int8TypeFromName(node_.GetString("out_type", "float"));
    if (out_type_ == DType::kInvalid) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": out_type must be uint8, int8 or float"));
    }
    const int64_t n = x.shape.dim(0), h = x.shape.dim(1), wd = x.shape.dim(2), c = x.shape.dim(3);
    const int64_t group = node_.GetInt("group", 1);
    const int64_t m = w.shape.dim(0);
    if (group < 1 || w.shape.dim(1) * group != c || m % group != 0) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": input has ", c,
                                                     " channels but W ", w.shape.ToString(),
                                                     " with group=", group));
    }
    if (has_bias_ &&
        ((ctx.inputs[2].dtype != DType::kFloat32 && ctx.inputs[2].dtype != DType::kInt32) ||
         ctx.inputs[2].shape.num_elements() != m)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": B must be float or int32 [", m, "]"));
    }
    int32_bias_ = has_bias_ && ctx.inputs[2].dtype == DType::kInt32;
    KILN_ASSIGN_OR_RETURN(Window2D g,
                          ComputeWindow(node_, h, wd, w.shape.dim(2), w.shape.dim(3), false));
    const float x_scale = node_.GetFloat("x_scale", 0);
    x_zero_point_ = static_cast<int32_t>(node_.GetInt("x_zero_point", 0));
    w_scales_ = node_.GetFloats("w_scales");
    const bool int8_out = out_type_ != DType::kFloat32;
    const float y_scale = int8_out ? node_.GetFloat("y_scale", 0) : 1.0f;
    y_zero_point_ = int8_out ? static_cast<int32_t>(node_.GetInt("y_zero_point", 0)) : 0;
    if (!(x_scale > 0) || !(y_scale > 0) || !std::isfinite(x_scale) || !std::isfinite(y_scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": x_scale and y_scale must be positive and finite"));
    }
    if (w_scales_.size() != 1 && static_cast<int64_t>(w_scales_.size()) != m) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": w_scales has ",
                                                     w_scales_.size(), " entries for ", m,
                                                     " output channels"));
    }
    if (w_scales_.size() == 1) w_scales_.assign(m, w_scales_[0]);
    std::vector<float> out_scales(m);
    bias_scale_.resize(m);
    for (int64_t i = 0; i < m; ++i) {
      if (!(w_scales_[i] > 0) || !std::isfinite(w_scales_[i])) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": w_scales must be positive and finite"));
      }
      out_scales[i] = x_scale * w_scales_[i] / y_scale;
      bias_scale_[i] = 1.0f / (x_scale * w_scales_[i]);
    }

    // Without VNNI, oneDNN's s8 x s8 path halves the weights when it packs them (to keep its
    // 16-bit pair sums from saturating), losing their last bit. The same sums are exact on
    // uint8 with a zero point 128 higher (7-bit weights keep u8 x s8 pairs in range), and
    // int8 -> uint8 is a flip of the top bit of each byte.
    flip_sign_ = x.dtype == DType::kInt8 && !CpuHasInt8Vnni();
    if (flip_sign_) x_zero_point_ += 128;
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    attr.set_output_scales(1 << 1, out_scales);
    if (x_zero_point_ != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {DNNL_RUNTIME_S32_VAL});
    if (y_zero_point_ != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {DNNL_RUNTIME_S32_VAL});
    dnnl::post_ops ops;
    const Shape y_shape = int8_out ? Shape{n, g.out_h, g.out_w, m} : Shape{n, m, g.out_h, g.out_w};
    for (size_t i = 0; i < post_ops.size(); ++i) {
      const ir::PostOp& p = post_ops[i];
      if (p.kind == ir::kResidualPostOp) {
        if (i != 0) {
          return absl::UnimplementedError(
              absl::StrCat(node_.Describe(), ": the residual Add must be the first post-op"));
        }
        const InputInfo& r = ctx.inputs[residual_index_];
        // oneDNN sums a residual of the destination's byte size under its own type, so an
        // int8 output may add a uint8 residual and the other way round.
        const bool type_ok = int8_out ? IsInt8(r.dtype) : r.dtype == DType::kFloat32;
        // (Create's batch stands for any batch: the residual's graph shape may leave it open.)
        if (!type_ok || (!creating_ && r.shape != y_shape)) {
          return absl::InvalidArgumentError(absl::StrCat(
              node_.Describe(), ": residual must be ", int8_out ? "uint8 or int8" : "float",
              y_shape.ToString(), ", is ", DTypeName(r.dtype), r.shape.ToString()));
        }
        residual_same_type_ = r.dtype == out_type_;
        if (int8_out) {
          const float r_scale = node_.GetFloat("r_scale", 0);
          if (!(r_scale > 0) || !std::isfinite(r_scale)) {
            return absl::InvalidArgumentError(
                absl::StrCat(node_.Describe(), ": r_scale must be positive and finite"));
          }
          ops.append_sum(r_scale / y_scale, static_cast<int32_t>(node_.GetInt("r_zero_point", 0)),
                         DnnlType(r.dtype));
        } else {
          ops.append_sum(1.0f);
        }
      } else if (p.kind == "Relu") {
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
      } else if (p.kind == "LeakyRelu") {
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, p.alpha, 0.0f);
      } else if (p.kind == "Clip") {
        ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip, p.alpha / y_scale,
                           p.beta / y_scale);
      } else {
        return absl::UnimplementedError(
            absl::StrCat(node_.Describe(), ": post-op ", p.kind, " has no int8 form"));
      }
    }
    attr.set_post_ops(ops);

    // Weights: [G, M/G, C/G, kH, kW] for groups (the same bytes as ONNX's [M, C/G, kH, kW]).
    const memory::dims w_dims =
        group > 1 ? memory::dims{group, m / group, c / group, w.shape.dim(2), w.shape.dim(3)}
                  : memory::dims{m, c, w.shape.dim(2), w.shape.dim(3)};
    w_.user = memory::desc(w_dims, memory::data_type::s8,
                           group > 1 ? memory::format_tag::goihw : memory::format_tag::oihw);
    x_desc_ = NhwcDesc(n, c, h, wd, flip_sign_ ? DType::kUInt8 : x.dtype);
    const memory::desc any_w(w_dims, memory::data_type::s8, memory::format_tag::any);
    const memory::desc want_y = int8_out
                                    ? NhwcDesc(n, m, g.out_h, g.out_w, out_type_)
                                    : memory::desc({n, m, g.out_h, g.out_w}, memory::data_type::f32,
                                                   memory::format_tag::any);
    user_y_desc_ = int8_out ? want_y : PlainDesc(y_shape);
    bias_desc_ = memory::desc({m}, memory::data_type::f32, memory::format_tag::a);
    auto& engine = CpuEngine();
    dnnl::convolution_forward::desc d(
        dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, x_desc_, any_w,
        bias_desc_, want_y, g.strides, g.dilations, g.pads_begin, g.pads_end);
    dnnl::convolution_forward::primitive_desc pd(d, attr, engine);
    y_desc_ = pd.dst_desc();
    scratch_desc_ = pd.scratchpad_desc();
    const memory::desc chosen_w = pd.weights_desc();
    if (!creating_) primitive_ = dnnl::convolution_forward(pd);  // Create keeps the weights only
    reorder_y_ = y_desc_ != user_y_desc_;

    // Scratch: [oneDNN scratchpad][bias in accumulator units][y in oneDNN's layout][weights]
    size_t offset = Align64(scratch_desc_.get_size());
    bias_offset_ = offset;
    offset += Align64(sizeof(float) * m);
    y_offset_ = offset;
    if (reorder_y_) offset += Align64(y_desc_.get_size());
    flipped_x_offset_ = offset;
    if (flip_sign_) offset += Align64(x.shape.num_elements());
    KILN_RETURN_IF_ERROR(
        w_.Prepare(ctx, node_, w, chosen_w, &offset, created ? &created->w_ : nullptr));
    if (creating_) return absl::OkStatus();
    if (reorder_y_) {
      y_reorder_ =
          dnnl::reorder(dnnl::reorder::primitive_desc(engine, y_desc_, engine, user_y_desc_));
      if (residual_index_ >= 0) {
        residual_reorder_ =
            dnnl::reorder(dnnl::reorder::primitive_desc(engine, user_y_desc_, engine, y_desc_));
      }
    }
    ctx.scratch_bytes = offset;
    ctx.activation_reorders = reorder_y_ ? 1 + (residual_index_ >= 0) : 0;
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = out_type_;
    ctx.output_shapes[0] = y_shape;
    if (residual_index_ >= 0 && !reorder_y_ && residual_same_type_) {
      ctx.output_in_place_of[0] = residual_index_;
    }
    return absl::OkStatus();
  }

  // Per run state: the memory objects and argument arrays of the primitive and its reorders.
  struct RunState : KernelRunState {
    DnnlMemory x, user_y, y, user_r, bias, scratchpad, x_zp, y_zp;  // y: in oneDNN's layout
    WeightsRunMemory w;
    DnnlCall residual_reorder, conv, y_reorder;
  };

  std::unique_ptr<RunState> MakeRunState() const {
    auto s = std::make_unique<RunState>();
    s->x = DnnlMemory(x_desc_);
    s->user_y = DnnlMemory(user_y_desc_);
    if (reorder_y_) s->y = DnnlMemory(y_desc_);
    if (reorder_y_ && residual_index_ >= 0) s->user_r = DnnlMemory(user_y_desc_);
    s->bias = DnnlMemory(bias_desc_);
    s->scratchpad = DnnlMemory(scratch_desc_);
    // The zero points are the kernel's, fixed after Reshape: pointed at once.
    const memory::desc zp_desc({1}, memory::data_type::s32, memory::format_tag::a);
    s->x_zp = DnnlMemory(zp_desc);
    s->x_zp.Point(&x_zero_point_);
    s->y_zp = DnnlMemory(zp_desc);
    s->y_zp.Point(&y_zero_point_);
    s->w = WeightsRunMemory(w_);
    const dnnl_memory_t y_mem = reorder_y_ ? s->y.get() : s->user_y.get();
    if (s->user_r) {
      s->residual_reorder = DnnlCall({{DNNL_ARG_FROM, s->user_r.get()}, {DNNL_ARG_TO, y_mem}});
    }
    s->conv = DnnlCall({{DNNL_ARG_SRC, s->x.get()},
                        {DNNL_ARG_WEIGHTS, s->w.memory(w_)},
                        {DNNL_ARG_BIAS, s->bias.get()},
                        {DNNL_ARG_DST, y_mem},
                        {DNNL_ARG_SCRATCHPAD, s->scratchpad.get()},
                        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_SRC, s->x_zp.get()},
                        {DNNL_ARG_ATTR_ZERO_POINTS | DNNL_ARG_DST, s->y_zp.get()}});
    if (reorder_y_) {
      s->y_reorder = DnnlCall({{DNNL_ARG_FROM, y_mem}, {DNNL_ARG_TO, s->user_y.get()}});
    }
    return s;
  }

 public:
  std::unique_ptr<KernelRunState> NewRunState() const override {
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

 private:
  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    ScopedDnnlThreads threads(ctx.intra_op_threads);
    auto& stream = ThreadStream();
    char* scratch = static_cast<char*>(ctx.scratch);
    Tensor& y = ctx.outputs[0];
    const void* x_data = ctx.inputs[0].raw_data();
    if (flip_sign_) {
      const uint8_t* src = static_cast<const uint8_t*>(x_data);
      uint8_t* dst = reinterpret_cast<uint8_t*>(scratch + flipped_x_offset_);
      ctx.ParallelFor(ctx.inputs[0].num_elements(), 1 << 16, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) dst[i] = src[i] ^ 0x80;
      });
      x_data = dst;
    }
    std::unique_ptr<RunState> owned;
    const RunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });
    // The run state's memory objects, re-pointed at this run's data (no allocation).
    s.x.Point(x_data);
    s.user_y.Point(y.raw_data());
    if (reorder_y_) s.y.Point(scratch + y_offset_);
    s.w.Point(w_, ctx.inputs[1].raw_data(), scratch, stream);
    // The bias in accumulator units (oneDNN adds it before the output scale).
    float* bias = reinterpret_cast<float*>(scratch + bias_offset_);
    const int64_t m = static_cast<int64_t>(bias_scale_.size());
    if (int32_bias_) {
      // Already in accumulator units (QLinearConv's B); exact in float below 2^24.
      const int32_t* b = ctx.inputs[2].data<int32_t>();
      for (int64_t i = 0; i < m; ++i) bias[i] = static_cast<float>(b[i]);
    } else if (has_bias_) {
      const float* b = ctx.inputs[2].data<float>();
      for (int64_t i = 0; i < m; ++i) bias[i] = b[i] * bias_scale_[i];
    } else {
      std::memset(bias, 0, sizeof(float) * m);
    }
    if (residual_index_ >= 0) {
      const Tensor& r = ctx.inputs[residual_index_];
      if (reorder_y_) {
        s.user_r.Point(r.raw_data());
        s.residual_reorder.Execute(residual_reorder_, stream);
      } else if (y.raw_data() != r.raw_data()) {
        std::memcpy(y.raw_data(), r.raw_data(), r.byte_size());
      }
    }
    s.bias.Point(bias);
    s.scratchpad.Point(scratch);
    s.conv.Execute(primitive_, stream);
    if (reorder_y_) s.y_reorder.Execute(y_reorder_, stream);
    stream.wait();
    return absl::OkStatus();
  }

  DType out_type_ = DType::kFloat32;
  bool has_bias_ = false;
  bool int32_bias_ = false;  // B in accumulator units (QLinearConv's), not real units
  int residual_index_ = -1;
  bool residual_same_type_ = true;  // else never in place: the output has another dtype
  int32_t x_zero_point_ = 0, y_zero_point_ = 0;
  std::vector<float> w_scales_, bias_scale_;
  memory::desc x_desc_, user_y_desc_, y_desc_, bias_desc_, scratch_desc_;
  bool reorder_y_ = false;
  size_t bias_offset_ = 0, y_offset_ = 0, flipped_x_offset_ = 0;
  bool flip_sign_ = false;  // int8 X read as uint8 with zero point + 128 (no VNNI)
  bool creating_ = false;   // ReshapeImpl runs for Create: pack the weights, make no primitive
  PrimitiveWeights w_;
  dnnl::primitive primitive_;
  dnnl::reorder y_reorder_, residual_reorder_;
};

// The run state of a primitive of one source and one destination (a reorder, a pooling).
struct InputToOutputRunState : KernelRunState {
  DnnlMemory src, dst, scratchpad;
  DnnlCall call;
};

std::unique_ptr<InputToOutputRunState> MakeInputToOutputRunState(const memory::desc& src_desc,
                                                                 int src_arg,
                                                                 const memory::desc& dst_desc,
                                                                 int dst_arg,
                                                                 const memory::desc* scratch_desc) {
  auto s = std::make_unique<InputToOutputRunState>();
  s->src = DnnlMemory(src_desc);
  s->dst = DnnlMemory(dst_desc);
  if (scratch_desc != nullptr) s->scratchpad = DnnlMemory(*scratch_desc);
  s->call = DnnlCall({{src_arg, s->src.get()},
                      {dst_arg, s->dst.get()},
                      {DNNL_ARG_SCRATCHPAD, s->scratchpad.get()}});  // left out when null
  return s;
}

// Runs a primitive of one source and one destination on this thread's stream: input 0 as
// `src_arg`, output 0 as `dst_arg`, and ctx.scratch as its scratchpad when `scratch_desc` is
// given; through the kernel's InputToOutputRunState, made with the same arguments.
void ExecuteInputToOutput(const dnnl::primitive& primitive, ComputeContext& ctx,
                          const memory::desc& src_desc, int src_arg, const memory::desc& dst_desc,
                          int dst_arg, const memory::desc* scratch_desc) {
  ScopedDnnlThreads threads(ctx.intra_op_threads);
  auto& stream = ThreadStream();
  std::unique_ptr<InputToOutputRunState> owned;
  const InputToOutputRunState& s = RunStateFor(ctx, owned, [&] {
    return MakeInputToOutputRunState(src_desc, src_arg, dst_desc, dst_arg, scratch_desc);
  });
  s.src.Point(ctx.inputs[0].raw_data());
  s.dst.Point(ctx.outputs[0].raw_data());
  if (scratch_desc != nullptr) s.scratchpad.Point(ctx.scratch);
  s.call.Execute(primitive, stream);
  stream.wait();
}

// Int8Quantize (float NCHW -> int8 NHWC) and Int8Dequantize (back): one oneDNN reorder each,
// with the scale and zero point as the reorder's attributes (rounding half to even and
// saturating, as ONNX's QuantizeLinear does; the scale is applied as a multiplication by its
// reciprocal, which can differ from ONNX's division by one step at exact ties).
class Int8ReorderKernel : public DnnlKernel {
 public:
  Int8ReorderKernel(const ir::Node& node, bool quantize) : DnnlKernel(node), quantize_(quantize) {}

 private:
  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs one input"));
    }
    const InputInfo& x = ctx.inputs[0];
    const float scale = node_.GetFloat("scale", 0);
    const int32_t zero_point = static_cast<int32_t>(node_.GetInt("zero_point", 0));
    if (!(scale > 0) || !std::isfinite(scale)) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": scale must be positive and finite"));
    }
    if (x.shape.rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": expects a rank-4 input, got ", x.shape.ToString()));
    }
    dnnl::primitive_attr attr;
    Shape out;
    DType out_type;
    if (quantize_) {
      out_type = ir::Int8TypeFromName(node_.GetString("to", ""));
      if (x.dtype != DType::kFloat32 || !IsInt8(out_type)) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": quantizes float to uint8 or int8 (attribute 'to')"));
      }
      const int64_t n = x.shape.dim(0), c = x.shape.dim(1), h = x.shape.dim(2), w = x.shape.dim(3);
      src_ = PlainDesc(x.shape);
      dst_ = NhwcDesc(n, c, h, w, out_type);
      out = Shape{n, h, w, c};
      attr.set_output_scales(0, {1.0f / scale});
      if (zero_point != 0) attr.set_zero_points(DNNL_ARG_DST, 0, {zero_point});
    } else {
      if (!IsInt8(x.dtype)) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": dequantizes uint8 or int8 [N,H,W,C]"));
      }
      out_type = DType::kFloat32;
      const int64_t n = x.shape.dim(0), h = x.shape.dim(1), w = x.shape.dim(2), c = x.shape.dim(3);
      src_ = NhwcDesc(n, c, h, w, x.dtype);
      out = Shape{n, c, h, w};
      dst_ = PlainDesc(out);
      attr.set_output_scales(0, {scale});
      if (zero_point != 0) attr.set_zero_points(DNNL_ARG_SRC, 0, {zero_point});
    }
    auto& engine = CpuEngine();
    reorder_ = dnnl::reorder(dnnl::reorder::primitive_desc(engine, src_, engine, dst_, attr));
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = out_type;
    ctx.output_shapes[0] = out;
    return absl::OkStatus();
  }

  std::unique_ptr<KernelRunState> NewRunState() const override {
    return NewDnnlRunState(
        [&] { return MakeInputToOutputRunState(src_, DNNL_ARG_FROM, dst_, DNNL_ARG_TO, nullptr); });
  }

  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    ExecuteInputToOutput(reorder_, ctx, src_, DNNL_ARG_FROM, dst_, DNNL_ARG_TO, nullptr);
    return absl::OkStatus();
  }

  bool quantize_;
  memory::desc src_, dst_;
  dnnl::reorder reorder_;
};

// Int8Pool: max or average pooling on channels-last int8 values (oneDNN's pooling; the
// quantization passes through: max pooling commutes with it, average pooling rounds once).
class Int8PoolKernel : public DnnlKernel {
 public:
  using DnnlKernel::DnnlKernel;

 private:
  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs one input"));
    }
    const InputInfo& x = ctx.inputs[0];
    if (!IsInt8(x.dtype) || x.shape.rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": X must be uint8 or int8 [N,H,W,C]"));
    }
    const std::string mode = node_.GetString("mode", "");
    if (mode != "max" && mode != "avg") {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": mode must be max or avg"));
    }
    const std::vector<int64_t> kernel = node_.GetInts("kernel_shape");
    if (kernel.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": kernel_shape must have 2 entries"));
    }
    const bool include_pad = node_.GetInt("count_include_pad", 0) != 0;
    if (mode == "avg" && include_pad && node_.GetInt("ceil_mode", 0) != 0) {
      // ONNX counts only the explicit pads, oneDNN also the ceil_mode extension.
      return absl::UnimplementedError(
          absl::StrCat(node_.Describe(), ": average pooling with count_include_pad and ceil_mode"));
    }
    const int64_t n = x.shape.dim(0), h = x.shape.dim(1), w = x.shape.dim(2), c = x.shape.dim(3);
    KILN_ASSIGN_OR_RETURN(Window2D g, ComputeWindow(node_, h, w, kernel[0], kernel[1], true));
    for (int64_t dil : g.dilations) {
      if (dil != 0) {
        return absl::UnimplementedError(absl::StrCat(node_.Describe(), ": dilated pooling"));
      }
    }
    src_ = NhwcDesc(n, c, h, w, x.dtype);
    dst_ = NhwcDesc(n, c, g.out_h, g.out_w, x.dtype);
    const dnnl::algorithm alg = mode == "max"
                                    ? dnnl::algorithm::pooling_max
                                    : (include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                   : dnnl::algorithm::pooling_avg_exclude_padding);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::pooling_forward::desc d(dnnl::prop_kind::forward_inference, alg, src_, dst_, g.strides,
                                  g.kernel, g.pads_begin, g.pads_end);
    dnnl::pooling_forward::primitive_desc pd(d, attr, CpuEngine());
    scratch_desc_ = pd.scratchpad_desc();
    primitive_ = dnnl::pooling_forward(pd);
    ctx.scratch_bytes = Align64(scratch_desc_.get_size());
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = x.dtype;
    ctx.output_shapes[0] = Shape{n, g.out_h, g.out_w, c};
    return absl::OkStatus();
  }

  std::unique_ptr<KernelRunState> NewRunState() const override {
    return NewDnnlRunState([&] {
      return MakeInputToOutputRunState(src_, DNNL_ARG_SRC, dst_, DNNL_ARG_DST, &scratch_desc_);
    });
  }

  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    ExecuteInputToOutput(primitive_, ctx, src_, DNNL_ARG_SRC, dst_, DNNL_ARG_DST, &scratch_desc_);
    return absl::OkStatus();
  }

  memory::desc src_, dst_, scratch_desc_;
  dnnl::primitive primitive_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "Int8Conv", Int8ConvKernel);
KILN_REGISTER_KERNEL_CLASS("kiln", "Int8Pool", Int8PoolKernel);
KILN_REGISTER_KERNEL("kiln", "Int8Quantize",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new Int8ReorderKernel(node, true));
                     });
KILN_REGISTER_KERNEL("kiln", "Int8Dequantize",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new Int8ReorderKernel(node, false));
                     });

}  // namespace

KILN_KERNEL_FILE(nn_int8_conv);

}  // namespace kiln::kernels::nn
