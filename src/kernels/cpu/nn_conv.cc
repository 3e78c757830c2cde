// Conv and ConvTranspose (ONNX semantics, 1-D to 3-D, groups, dilations, auto_pad) on oneDNN,
// and the optimizer's "kiln" FusedConv: Conv + bias + post-ops (activations, residual Add).
//
// oneDNN picks the memory layouts it runs fastest (format "any"); constant weights are
// reordered into its layout once, when the plan is compiled; activations are reordered per
// run only when oneDNN's choice differs from the plain NCHW layout of Kiln's tensors.
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/ir/conv_geometry.h"
#include "kiln/kernels/conv_layout.h"
#include "kiln/kernels/kernel.h"
#include "nn_conv_transpose_ref.h"
#include "nn_conv_winograd.h"
#include "nn_dnnl.h"
#include "nn_dnnl_run_state.h"

namespace kiln::kernels::nn {
namespace {

using dnnl::memory;

struct ConvGeometry {
  std::vector<int64_t> strides, dilations, pads_begin, pads_end, kernel, out_spatial;
};

// Output size and padding for each spatial dimension per ONNX's Conv/ConvTranspose rules.
absl::StatusOr<ConvGeometry> ComputeGeometry(const ir::Node& node, const Shape& x, const Shape& w,
                                             bool transpose) {
  const int spatial = x.rank() - 2;
  ConvGeometry g;
  g.kernel = node.GetInts("kernel_shape");
  if (g.kernel.empty()) {
    for (int i = 0; i < spatial; ++i) g.kernel.push_back(w.dim(2 + i));
  }
  g.strides = node.GetInts("strides", std::vector<int64_t>(spatial, 1));
  g.dilations = node.GetInts("dilations", std::vector<int64_t>(spatial, 1));
  std::vector<int64_t> pads = node.GetInts("pads", std::vector<int64_t>(2 * spatial, 0));
  if (static_cast<int>(g.kernel.size()) != spatial ||
      static_cast<int>(g.strides.size()) != spatial ||
      static_cast<int>(g.dilations.size()) != spatial ||
      static_cast<int>(pads.size()) != 2 * spatial) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": kernel_shape/strides/dilations/pads do not match ",
                     spatial, " spatial dimensions of input ", x.ToString()));
  }
  for (int i = 0; i < spatial; ++i) {
    if (g.strides[i] < 1 || g.dilations[i] < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Describe(), ": strides and dilations must be positive"));
    }
  }
  const std::string auto_pad_name = node.GetString("auto_pad", "NOTSET");
  const std::optional<ir::AutoPad> parsed_auto_pad = ir::ParseAutoPad(auto_pad_name);
  if (!parsed_auto_pad.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": unknown auto_pad '", auto_pad_name, "'"));
  }
  const ir::AutoPad auto_pad = *parsed_auto_pad;
  const bool same = auto_pad == ir::AutoPad::kSameUpper || auto_pad == ir::AutoPad::kSameLower;
  const std::vector<int64_t> output_padding =
      node.GetInts("output_padding", std::vector<int64_t>(spatial, 0));
  const std::vector<int64_t> output_shape = node.GetInts("output_shape");
  for (int i = 0; i < spatial; ++i) {
    const int64_t in = x.dim(2 + i);
    const int64_t k_eff = (g.kernel[i] - 1) * g.dilations[i] + 1;
    int64_t pb = pads[i], pe = pads[spatial + i];
    int64_t out;
    if (!transpose) {
      const ir::WindowAxis axis =
          ir::WindowOutputAxis(in, g.kernel[i], g.strides[i], g.dilations[i], pb, pe, auto_pad);
      out = axis.out;
      pb = axis.pad_begin;
      pe = axis.pad_end;
    } else {
      const int64_t op = output_padding[i];
      if (!output_shape.empty()) {
        out = output_shape[output_shape.size() - spatial + i];
        const int64_t total = g.strides[i] * (in - 1) + op + k_eff - out;
        // ONNX halves with floor division: an output_shape one larger than the full result
        // (total -1) pads the end, not the start.
        const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);
        if (auto_pad == ir::AutoPad::kSameUpper) {
          pb = half;
          pe = total - pb;
        } else {
          pe = half;
          pb = total - pe;
        }
      } else if (same) {
        out = in * g.strides[i];
        const int64_t total = std::max<int64_t>(0, g.strides[i] * (in - 1) + op + k_eff - out);
        pb = auto_pad == ir::AutoPad::kSameUpper ? total / 2 : total - total / 2;
        pe = total - pb;
      } else {
        if (auto_pad == ir::AutoPad::kValid) pb = pe = 0;
        out = g.strides[i] * (in - 1) + op + k_eff - pb - pe;
      }
    }
    if (out <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(node.Describe(), ": input ", x.ToString(),
                                                     " is too small for kernel ", w.ToString()));
    }
    g.pads_begin.push_back(pb);
    g.pads_end.push_back(pe);
    g.out_spatial.push_back(out);
  }
  return g;
}

// The attributes a convolution's geometry reads, checked without shapes (Create): the shape
// checks stay in ComputeGeometry, at Reshape.
absl::Status ValidateConvAttributes(const ir::Node& node) {
  if (node.GetInt("group", 1) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": group must be positive, got ", node.GetInt("group", 1)));
  }
  for (const char* name : {"strides", "dilations"}) {
    for (int64_t v : node.GetInts(name)) {
      if (v < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(node.Describe(), ": ", name, " must be positive, got ", v));
      }
    }
  }
  for (int64_t v : node.GetInts("kernel_shape")) {
    if (v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(node.Describe(), ": kernel_shape must be positive, got ", v));
    }
  }
  const std::string auto_pad = node.GetString("auto_pad", "NOTSET");
  if (!ir::ParseAutoPad(auto_pad).has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(node.Describe(), ": unknown auto_pad '", auto_pad, "'"));
  }
  return absl::OkStatus();
}

class ConvKernel : public DnnlKernel {
 public:
  ConvKernel(const ir::Node& node, bool transpose) : DnnlKernel(node), transpose_(transpose) {}

 private:
  // Once per node per model: checks the attributes, and packs constant weights into the layout
  // oneDNN picks for the input shape the graph records (batch 1 where the graph leaves the batch
  // open: a convolution's weight layout follows the ISA, the channels and the implementation,
  // not the batch). Plans whose primitive picks the same layout share them (PrimitiveWeights).
  absl::Status CreateImpl(CreateContext& ctx) override {
    KILN_ASSIGN_OR_RETURN(post_ops_, ReadPostOps(node_));
    dnnl::post_ops ops;
    KILN_RETURN_IF_ERROR(AppendPostOps(node_, post_ops_, ops).status());
    KILN_RETURN_IF_ERROR(ValidateConvAttributes(node_));
    if (ctx.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs X and W inputs"));
    }
    const InputInfo& x = ctx.inputs[0];
    const InputInfo& w = ctx.inputs[1];
    if (w.constant == nullptr || w.dtype != DType::kFloat32 || x.shape.rank() != w.shape.rank() ||
        x.shape.rank() < 3) {
      return absl::OkStatus();  // nothing to pack, or no shape to choose the layout for
    }
    Shape x_shape = x.shape;
    if (x_shape.dim(0) <= 0) x_shape.set_dim(0, 1);
    for (int i = 1; i < x_shape.rank(); ++i) {
      if (x_shape.dim(i) <= 0) return absl::OkStatus();  // Reshape packs for the plan's shape
    }
    const absl::Status packed = ReshapeForCreate(ctx, x_shape, &creating_,
                                                 [&](ReshapeContext& c) { return ReshapeImpl(c); });
    reference_.reset();
    // A shape the real plans will not have (the graph's types disagree with W, or oneDNN has no
    // primitive for it): nothing packed here; Reshape reports or packs for the plan's shape.
    if (!packed.ok()) w_ = PrimitiveWeights();
    return absl::OkStatus();
  }

  absl::Status ReshapeImpl(ReshapeContext& ctx) override {
    reference_.reset();
    guard_ = GuardedActivation();
    const ConvKernel* created = static_cast<const ConvKernel*>(ctx.created);
    if (created != nullptr && created != this) {
      post_ops_ = created->post_ops_;  // read and checked by Create
    } else if (created == nullptr) {
      KILN_ASSIGN_OR_RETURN(post_ops_, ReadPostOps(node_));
    }
    const bool has_residual =
        !post_ops_.empty() && std::any_of(post_ops_.begin(), post_ops_.end(), [](const PostOp& p) {
          return p.kind == ir::kResidualPostOp;
        });
    if (ctx.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs X and W inputs"));
    }
    const InputInfo& x = ctx.inputs[0];
    const InputInfo& w = ctx.inputs[1];
    has_bias_ = ctx.inputs.size() > 2 && ctx.inputs[2].present();
    residual_index_ = has_residual ? static_cast<int>(ctx.inputs.size()) - 1 : -1;
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (ctx.inputs[i].present() && ctx.inputs[i].dtype != DType::kFloat32) {
        return absl::UnimplementedError(absl::StrCat(node_.Describe(), ": input ", i, " is ",
                                                     DTypeName(ctx.inputs[i].dtype),
                                                     "; only float is supported"));
      }
    }
    if (x.shape.rank() < 3 || x.shape.rank() > 5 || w.shape.rank() != x.shape.rank()) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": expects X of rank 3 to 5 and W of the same rank; got X ",
          x.shape.ToString(), " and W ", w.shape.ToString()));
    }
    const int64_t group = node_.GetInt("group", 1);
    const int64_t n = x.shape.dim(0), c = x.shape.dim(1);
    int64_t m;  // output channels
    if (!transpose_) {
      m = w.shape.dim(0);
      if (w.shape.dim(1) * group != c || m % group != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": input has ", c, " channels but W ", w.shape.ToString(),
            " with group=", group, " expects ", w.shape.dim(1) * group));
      }
    } else {
      m = w.shape.dim(1) * group;
      if (w.shape.dim(0) != c) {
        return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": input has ", c,
                                                       " channels but W is ", w.shape.ToString()));
      }
    }
    KILN_ASSIGN_OR_RETURN(ConvGeometry g, ComputeGeometry(node_, x.shape, w.shape, transpose_));
    Shape out_shape{n, m};
    for (int64_t d : g.out_spatial) out_shape.push_back(d);
    // No input channels (or an empty output): no work for oneDNN, whose primitive creation
    // divides by these dimensions. Compute writes what the epilogue makes of a zero sum.
    empty_work_ = out_shape.num_elements() == 0 || c == 0;
    if (empty_work_) {
      if (!creating_ && residual_index_ >= 0 && ctx.inputs[residual_index_].shape != out_shape) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": residual input ", ctx.inputs[residual_index_].shape.ToString(),
            " must match output ", out_shape.ToString()));
      }
      y_layout_ = x.shape.rank() == 4 ? ctx.output_layout(0) : ir::MemoryLayout::kPlain;
      if (residual_index_ >= 0 && x.shape.rank() == 4 &&
          ctx.inputs[residual_index_].layout != y_layout_) {
        return absl::UnimplementedError(
            absl::StrCat(node_.Describe(),
                         ": a convolution with no input channels and a residual in another "
                         "memory layout"));
      }
      ctx.scratch_bytes = 0;
      ctx.SetNumOutputs(1);
      ctx.output_dtypes[0] = DType::kFloat32;
      ctx.output_shapes[0] = out_shape;
      return absl::OkStatus();
    }

    // Weights as oneDNN wants them: [G, O/G, I/G, k...] for groups (same bytes as ONNX's).
    memory::dims w_dims;
    const int spatial = x.shape.rank() - 2;
    if (group > 1) {
      w_dims = {group, m / group, c / group};
    } else {
      w_dims = {m, c};
    }
    for (int i = 0; i < spatial; ++i) w_dims.push_back(w.shape.dim(2 + i));
    if (!transpose_) {
      static const memory::format_tag plain[] = {memory::format_tag::oiw, memory::format_tag::oihw,
                                                 memory::format_tag::oidhw};
      static const memory::format_tag grouped[] = {
          memory::format_tag::goiw, memory::format_tag::goihw, memory::format_tag::goidhw};
      w_.user = memory::desc(w_dims, memory::data_type::f32,
                             group > 1 ? grouped[spatial - 1] : plain[spatial - 1]);
    } else {
      // ONNX ConvTranspose weights are [C_in, C_out/G, k...]: per group the input channel is
      // the outer dimension, so describe them to oneDNN ([G,] O, I, k...) with strides.
      int64_t k_prod = 1;
      for (int i = 0; i < spatial; ++i) k_prod *= w.shape.dim(2 + i);
      memory::dims strides_w;
      if (group > 1)
        strides_w = {(c / group) * (m / group) * k_prod, k_prod, (m / group) * k_prod};
      else
        strides_w = {k_prod, m * k_prod};
      int64_t stride = 1;
      std::vector<int64_t> spatial_strides(spatial);
      for (int i = spatial - 1; i >= 0; --i) {
        spatial_strides[i] = stride;
        stride *= w.shape.dim(2 + i);
      }
      for (int i = 0; i < spatial; ++i) strides_w.push_back(spatial_strides[i]);
      w_.user = memory::desc(w_dims, memory::data_type::f32, strides_w);
    }
    // Values between 2-D convs keep the layout this CPU's convolutions read and write (the
    // optimizer's conv_activation_layout pass): their logical shape stays NCHW, their bytes
    // are what oneDNN picks below, so no reorder runs between them.
    user_x_desc_ = LayoutDesc(x.shape, x.layout);
    user_y_desc_ = LayoutDesc(out_shape, ctx.output_layout(0));
    user_r_desc_ = LayoutDesc(out_shape, residual_index_ >= 0 ? ctx.inputs[residual_index_].layout
                                                              : ir::MemoryLayout::kPlain);
    const memory::desc any_x(ToDnnlDims(x.shape), memory::data_type::f32, memory::format_tag::any);
    const memory::desc any_y(ToDnnlDims(out_shape), memory::data_type::f32,
                             memory::format_tag::any);
    const memory::desc any_w(w_dims, memory::data_type::f32, memory::format_tag::any);
    bias_desc_ = has_bias_ ? memory::desc({m}, memory::data_type::f32, memory::format_tag::a)
                           : memory::desc();
    const memory::desc& bias_desc = bias_desc_;
    memory::dims strides(g.strides.begin(), g.strides.end());
    memory::dims dil;
    for (int64_t d : g.dilations) dil.push_back(d - 1);  // oneDNN counts dilation from 0
    memory::dims pl(g.pads_begin.begin(), g.pads_begin.end());
    memory::dims pr(g.pads_end.begin(), g.pads_end.end());

    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    dnnl::post_ops ops;
    KILN_ASSIGN_OR_RETURN(epilogue_, AppendPostOps(node_, post_ops_, ops));
    attr.set_post_ops(ops);
    auto& engine = CpuEngine();
    memory::desc chosen_x, chosen_w, chosen_y, scratch;
    // The primitive for `d`, and the layouts oneDNN chose for it.
    auto make = [&](auto primitive_type, const auto& d) {
      using Primitive = decltype(primitive_type);
      typename Primitive::primitive_desc pd(d, attr, engine);
      chosen_x = pd.src_desc();
      chosen_w = pd.weights_desc();
      chosen_y = pd.dst_desc();
      scratch = pd.scratchpad_desc();
      if (!creating_) primitive_ = Primitive(pd);  // Create keeps only the packed weights
    };
    if (!transpose_) {
      // In a blocked plan (nChw8c/nChw16c) the convolution is asked for the plan's layouts
      // where oneDNN has them: on AVX-512, "any" picks NHWC brgconv, and a plan kept in
      // Winograd's nChw16c (PassOptions::winograd_conv_layout) would reorder around every
      // direct convolution. Otherwise, and where oneDNN has only its reference loop for them
      // (nChw16c on AVX2), "any".
      auto direct_desc = [&](bool plan_layouts) {
        return dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
            plan_layouts && x.layout != ir::MemoryLayout::kPlain ? user_x_desc_ : any_x, any_w,
            bias_desc,
            plan_layouts && ctx.output_layout(0) != ir::MemoryLayout::kPlain ? user_y_desc_ : any_y,
            strides, dil, pl, pr);
      };
      const bool blocked =
          ir::ChannelBlock(x.layout) > 0 || ir::ChannelBlock(ctx.output_layout(0)) > 0;
      std::optional<dnnl::convolution_forward::desc> direct_storage;
      if (blocked) {
        try {
          direct_storage.emplace(direct_desc(true));
          const dnnl::convolution_forward::primitive_desc pd(*direct_storage, attr, CpuEngine());
          // oneDNN's reference loop takes any layout, hundreds of times slower than a reorder.
          if (std::string_view(pd.impl_info_str()).rfind("ref", 0) == 0) direct_storage.reset();
        } catch (const dnnl::error&) {
          direct_storage.reset();
        }
      }
      if (!direct_storage) direct_storage.emplace(direct_desc(false));
      const dnnl::convolution_forward::desc& direct = *direct_storage;
      // Winograd for 3x3 stride-1 convolutions where it is measured faster for this plan
      // (nn_conv_winograd.h; KILN_CONV_WINOGRAD=0 turns it off).
      // The model's node (ctx.node), the same object for every plan: the key of what the
      // model's cache holds for this convolution.
      WinogradQuery query{ctx.node != nullptr ? ctx.node : &node_,
                          creating_,
                          group,
                          c,
                          m,
                          g.kernel,
                          g.strides,
                          g.dilations,
                          &w};
      query.post_ops = &post_ops_;
      query.epilogue = &epilogue_;
      query.has_residual = has_residual;
      query.direct = &direct;
      query.attr = &attr;
      query.user_x = user_x_desc_;
      query.user_y = user_y_desc_;
      query.user_r = user_r_desc_;
      query.x_layout = x.layout;
      query.y_layout = ctx.output_layout(0);
      query.r_layout =
          residual_index_ >= 0 ? ctx.inputs[residual_index_].layout : ir::MemoryLayout::kPlain;
      query.user_w = w_.user;
      query.bias = bias_desc;
      query.strides_dnnl = strides;
      query.dilations_dnnl = dil;
      query.pads_begin = pl;
      query.pads_end = pr;
      query.threads = ctx.intra_op_threads;
      query.cache = ctx.packed_constants;
      KILN_RETURN_IF_ERROR(winograd_.Choose(query));
      make(dnnl::convolution_forward(), winograd_.active() ? winograd_.desc() : direct);
      if (!creating_ && !winograd_.active() && !winograd_.own()) {
        PrepareGuardedActivation(ctx, direct, attr, chosen_x, chosen_w, chosen_y, scratch);
      }
    } else {
      try {
        make(dnnl::deconvolution_forward(),
             dnnl::deconvolution_forward::desc(dnnl::prop_kind::forward_inference,
                                               dnnl::algorithm::deconvolution_direct, any_x, any_w,
                                               bias_desc, any_y, strides, dil, pl, pr));
      } catch (const dnnl::error&) {
        // oneDNN has no deconvolution for this geometry (negative padding from output_shape):
        // the direct loop, for plain layouts without fused post-ops.
        if (!post_ops_.empty() || x.layout != ir::MemoryLayout::kPlain ||
            ctx.output_layout(0) != ir::MemoryLayout::kPlain) {
          throw;
        }
        reference_ = std::make_unique<ConvTransposeRefGeometry>(ConvTransposeRefGeometry{
            n, c, m, group, std::vector<int64_t>(x.shape.dims().begin() + 2, x.shape.dims().end()),
            g.kernel, g.out_spatial, g.strides, g.dilations, g.pads_begin});
        ctx.scratch_bytes = 0;
        ctx.SetNumOutputs(1);
        ctx.output_dtypes[0] = DType::kFloat32;
        ctx.output_shapes[0] = out_shape;
        return absl::OkStatus();
      }
    }
    scratch_desc_ = scratch;
    x_desc_ = chosen_x;
    y_desc_ = chosen_y;
    reorder_x_ = chosen_x != user_x_desc_;
    reorder_y_ = chosen_y != user_y_desc_;

    // Scratch: [oneDNN scratchpad][x in oneDNN layout][y in oneDNN layout][w if not constant]
    size_t offset = 0;
    scratchpad_offset_ = offset;
    offset += Align64(scratch.get_size());
    x_offset_ = offset;
    if (reorder_x_) offset += Align64(chosen_x.get_size());
    y_offset_ = offset;
    if (reorder_y_) offset += Align64(chosen_y.get_size());
    KILN_RETURN_IF_ERROR(
        w_.Prepare(ctx, node_, w, chosen_w, &offset, created ? &created->w_ : nullptr));
    if (creating_) return absl::OkStatus();
    if (reorder_x_)
      x_reorder_ =
          dnnl::reorder(dnnl::reorder::primitive_desc(engine, user_x_desc_, engine, chosen_x));
    if (reorder_y_) {
      y_reorder_ =
          dnnl::reorder(dnnl::reorder::primitive_desc(engine, chosen_y, engine, user_y_desc_));
    }
    // The residual is copied into the destination before the sum post-op; a reorder when its
    // layout is not the destination's.
    residual_to_dst_reorder_ = residual_index_ >= 0 && user_r_desc_ != chosen_y;
    if (residual_to_dst_reorder_) {
      residual_reorder_ =
          dnnl::reorder(dnnl::reorder::primitive_desc(engine, user_r_desc_, engine, chosen_y));
    }
    winograd_.ReserveScratch(&offset);
    ctx.scratch_bytes = offset;
    ctx.activation_reorders = int{reorder_x_} + int{reorder_y_} + int{residual_to_dst_reorder_};

    if (residual_index_ >= 0) {
      const InputInfo& r = ctx.inputs[residual_index_];
      if (r.shape != out_shape) {
        return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": residual input ",
                                                       r.shape.ToString(), " must match output ",
                                                       out_shape.ToString()));
      }
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = out_shape;
    // (Not in place under Winograd: its fallback reads the residual again.)
    if (residual_index_ >= 0 && !reorder_y_ && !residual_to_dst_reorder_ && !winograd_.active() &&
        !winograd_.own()) {
      ctx.output_in_place_of[0] = residual_index_;
    }
    return absl::OkStatus();
  }

  // The primitive with the epilogue's Relu or Clip inside, for the runs whose input passes the
  // guard (nn_dnnl.h, GuardedActivation): only where it is the same computation as `primitive_`
  // (the same implementation and memory layouts, scratchpad no larger), the activation is the
  // only post-op, and no residual is added (the guard bounds the convolution's own sums, not a
  // tensor added to them).
  void PrepareGuardedActivation(ReshapeContext& ctx, const dnnl::convolution_forward::desc& direct,
                                const dnnl::primitive_attr& attr, const memory::desc& x,
                                const memory::desc& w, const memory::desc& y,
                                const memory::desc& scratch) {
    const InputInfo& weights = ctx.inputs[1];
    if (residual_index_ >= 0 || epilogue_.size() != post_ops_.size() ||
        weights.constant == nullptr || (has_bias_ && ctx.inputs[2].constant == nullptr)) {
      return;
    }
    const int64_t rows = weights.shape.dim(0);
    GuardedActivation guard =
        PlanGuardedActivation(epilogue_, weights.constant->data<float>(), rows,
                              rows > 0 ? weights.shape.num_elements() / rows : 0,
                              has_bias_ ? ctx.inputs[2].constant->data<float>() : nullptr);
    if (!guard.usable) return;
    dnnl::primitive_attr inside_attr = attr;
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, guard.alg, guard.alpha, guard.beta);
    inside_attr.set_post_ops(ops);
    try {
      dnnl::convolution_forward::primitive_desc pd(direct, inside_attr, CpuEngine());
      dnnl::convolution_forward::primitive_desc plain_pd(direct, attr, CpuEngine());
      if (pd.src_desc() != x || pd.weights_desc() != w || pd.dst_desc() != y ||
          pd.scratchpad_desc().get_size() > scratch.get_size() ||
          std::string(pd.impl_info_str()) != plain_pd.impl_info_str()) {
        return;
      }
      activation_inside_ = dnnl::convolution_forward(pd);
    } catch (const dnnl::error&) {
      return;
    }
    guard_ = guard;
    ctx.guarded_activations = 1;
  }

  // Output of a convolution with nothing to sum: bias per channel, then the post-ops.
  absl::Status ComputeEmptyWork(ComputeContext& ctx) const {
    Tensor& y = ctx.outputs[0];
    const int64_t total = y.num_elements();
    if (total == 0) return absl::OkStatus();
    const int64_t spatial = total / (y.dim(0) * y.dim(1));
    float* yv = y.data<float>();
    std::vector<float> residual;
    if (residual_index_ >= 0) {
      const Tensor& r = ctx.inputs[residual_index_];
      residual.assign(r.data<float>(), r.data<float>() + total);
    }
    const float* bias = has_bias_ ? ctx.inputs[2].data<float>() : nullptr;
    for (int64_t i = 0; i < total; ++i) {
      const int64_t channel =
          y.rank() == 4 ? ChannelAt(i, y.shape(), y_layout_) : (i / spatial) % y.dim(1);
      yv[i] = bias != nullptr ? bias[channel] : 0.0f;
    }
    ApplyPostOpsInOrder(post_ops_, residual.data(), yv, total);
    return absl::OkStatus();
  }

  // Per run state: the memory objects and argument arrays of the primitive and its reorders.
  struct RunState : KernelRunState {
    DnnlMemory user_x, user_y, user_r, x, y, bias, scratchpad;  // x, y: in oneDNN's layout
    WeightsRunMemory w;
    DnnlCall x_reorder, residual_reorder, conv, y_reorder;
  };

  std::unique_ptr<RunState> MakeRunState() const {
    auto s = std::make_unique<RunState>();
    s->user_x = DnnlMemory(user_x_desc_);
    s->user_y = DnnlMemory(user_y_desc_);
    if (reorder_x_) s->x = DnnlMemory(x_desc_);
    if (reorder_y_) s->y = DnnlMemory(y_desc_);
    if (residual_to_dst_reorder_) s->user_r = DnnlMemory(user_r_desc_);
    if (has_bias_) s->bias = DnnlMemory(bias_desc_);
    s->scratchpad = DnnlMemory(scratch_desc_);
    s->w = WeightsRunMemory(w_);
    const dnnl_memory_t x_mem = reorder_x_ ? s->x.get() : s->user_x.get();
    const dnnl_memory_t y_mem = reorder_y_ ? s->y.get() : s->user_y.get();
    if (reorder_x_) {
      s->x_reorder = DnnlCall({{DNNL_ARG_FROM, s->user_x.get()}, {DNNL_ARG_TO, x_mem}});
    }
    if (residual_to_dst_reorder_) {
      s->residual_reorder = DnnlCall({{DNNL_ARG_FROM, s->user_r.get()}, {DNNL_ARG_TO, y_mem}});
    }
    s->conv = DnnlCall({{DNNL_ARG_SRC, x_mem},
                        {DNNL_ARG_WEIGHTS, s->w.memory(w_)},
                        {DNNL_ARG_BIAS, s->bias.get()},  // left out when null
                        {DNNL_ARG_DST, y_mem},
                        {DNNL_ARG_SCRATCHPAD, s->scratchpad.get()}});
    if (reorder_y_) {
      s->y_reorder = DnnlCall({{DNNL_ARG_FROM, y_mem}, {DNNL_ARG_TO, s->user_y.get()}});
    }
    return s;
  }

 public:
  std::unique_ptr<KernelRunState> NewRunState() const override {
    if (empty_work_ || reference_) return nullptr;
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

 private:
  absl::Status ComputeImpl(ComputeContext& ctx) const override {
    if (empty_work_) return ComputeEmptyWork(ctx);
    if (reference_) {
      ConvTransposeReference(*reference_, ctx.inputs[0].data<float>(), ctx.inputs[1].data<float>(),
                             has_bias_ ? ctx.inputs[2].data<float>() : nullptr,
                             ctx.outputs[0].data<float>(), ctx);
      return absl::OkStatus();
    }
    char* scratch = static_cast<char*>(ctx.scratch);
    const Tensor& x = ctx.inputs[0];
    Tensor& y = ctx.outputs[0];
    // Kiln's Winograd, with every post-op; the direct primitive below only when it met a NaN
    // or infinity.
    if (winograd_.own() &&
        winograd_.RunOwn(x.data<float>(), has_bias_ ? ctx.inputs[2].data<float>() : nullptr,
                         residual_index_ >= 0 ? ctx.inputs[residual_index_].data<float>() : nullptr,
                         y.data<float>(), scratch, ctx.intra_op_threads)) {
      return absl::OkStatus();
    }
    ScopedDnnlThreads threads(ctx.intra_op_threads);
    auto& stream = ThreadStream();
    std::unique_ptr<RunState> owned;
    const RunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });

    // The run state's memory objects, re-pointed at this run's data (no allocation).
    s.user_x.Point(x.raw_data());
    s.user_y.Point(y.raw_data());
    if (reorder_x_) {
      s.x.Point(scratch + x_offset_);
      s.x_reorder.Execute(x_reorder_, stream);
    }
    if (reorder_y_) s.y.Point(scratch + y_offset_);
    s.w.Point(w_, ctx.inputs[1].raw_data(), scratch, stream);
    if (residual_index_ >= 0) {
      const Tensor& r = ctx.inputs[residual_index_];
      void* y_data = reorder_y_ ? scratch + y_offset_ : y.raw_data();
      if (residual_to_dst_reorder_) {
        s.user_r.Point(r.raw_data());
        s.residual_reorder.Execute(residual_reorder_, stream);
      } else if (y_data != r.raw_data()) {
        std::memcpy(y_data, r.raw_data(), y_desc_.get_size());
      }
    }
    s.scratchpad.Point(scratch + scratchpad_offset_);
    if (has_bias_) s.bias.Point(ctx.inputs[2].raw_data());
    // Relu/Clip inside the primitive when this run's input cannot make a sum NaN (nn_dnnl.h):
    // known from the plan (the input came from such a Clip), or read here.
    const bool inside =
        guard_.usable &&
        ((!ctx.input_bounds.empty() && ctx.input_bounds[0] <= guard_.input_limit) ||
         InputWithinLimit(x.data<float>(), x.num_elements(), guard_.input_limit, ctx));
    if (guard_.usable) CountGuardedActivationRun(inside);
    if (inside && !ctx.output_bounds.empty()) ctx.output_bounds[0] = guard_.output_bound;
    s.conv.Execute(inside ? activation_inside_ : primitive_, stream);
    if (reorder_y_) s.y_reorder.Execute(y_reorder_, stream);
    stream.wait();
    if (winograd_.active()) {
      winograd_.RecomputeIfNotFinite(
          x.raw_data(), ctx.inputs[1].raw_data(), has_bias_ ? ctx.inputs[2].raw_data() : nullptr,
          residual_index_ >= 0 ? ctx.inputs[residual_index_].raw_data() : nullptr, y.raw_data(),
          scratch, ctx.intra_op_threads, stream);
    }
    if (!inside) ApplyEpilogue(epilogue_, y.data<float>(), y.num_elements(), ctx);
    return absl::OkStatus();
  }

  bool transpose_;
  bool creating_ = false;  // ReshapeImpl runs for Create: pack the weights, make no primitive
  std::vector<PostOp> post_ops_;
  std::vector<PostOp> epilogue_;  // post-ops run after the primitive (nn_dnnl.h)
  bool has_bias_ = false;
  bool empty_work_ = false;  // no input channels or no output: oneDNN is not called
  ir::MemoryLayout y_layout_ = ir::MemoryLayout::kPlain;  // (only read when empty_work_)
  int residual_index_ = -1;
  memory::desc user_x_desc_, user_y_desc_, user_r_desc_, x_desc_, y_desc_, scratch_desc_,
      bias_desc_;
  bool reorder_x_ = false, reorder_y_ = false;
  bool residual_to_dst_reorder_ = false;
  size_t scratchpad_offset_ = 0, x_offset_ = 0, y_offset_ = 0;
  PrimitiveWeights w_;
  dnnl::primitive primitive_;
  GuardedActivation guard_;            // usable: activation_inside_ exists
  dnnl::primitive activation_inside_;  // primitive_ with the epilogue's activation inside
  std::unique_ptr<ConvTransposeRefGeometry> reference_;  // set when oneDNN can't run it
  ConvWinograd winograd_;  // the algorithm chosen for this plan, and Winograd's fallback
  dnnl::reorder x_reorder_, y_reorder_, residual_reorder_;
};

KILN_REGISTER_KERNEL("", "Conv",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new ConvKernel(node, false));
                     });
KILN_REGISTER_KERNEL(ir::kKilnDomain, ir::kFusedConvOp,
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new ConvKernel(node, false));
                     });
KILN_REGISTER_KERNEL("", "ConvTranspose",
                     [](const ir::Node& node) -> absl::StatusOr<std::unique_ptr<OpKernel>> {
                       return std::unique_ptr<OpKernel>(new ConvKernel(node, true));
                     });

}  // namespace

KILN_KERNEL_FILE(nn_conv);

}  // namespace kiln::kernels::nn

namespace kiln::kernels {

// Asks oneDNN whether it has a brgemm-based convolution for NHWC (it picks one only when asked
// for NHWC explicitly; on AVX-512 it beat the blocked nChw16c jit kernels by 1.1-2.4x), and
// otherwise which layout it runs a typical mid-network convolution in (format "any"; on AVX2
// nChw8c, 1.1-1.8x faster than NHWC or NCHW there). docs/performance/runtime.md has the
// figures; KILN_CONV_LAYOUT=nhwc|nChw8c|nChw16c|plain overrides the choice to measure them.
ir::MemoryLayout PreferredConvActivationLayout() {
  static const ir::MemoryLayout preferred = [] {
    using dnnl::memory;
    try {
      auto& engine = nn::CpuEngine();
      const memory::dims src{1, 64, 28, 28}, wei{64, 64, 3, 3}, dst{1, 64, 28, 28};
      auto impl_for = [&](memory::format_tag tag, memory::desc* chosen_src,
                          memory::desc* chosen_dst) {
        const memory::desc s(src, memory::data_type::f32, tag);
        const memory::desc d(dst, memory::data_type::f32, tag);
        const memory::desc w(wei, memory::data_type::f32, memory::format_tag::any);
        dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference,
                                             dnnl::algorithm::convolution_direct, s, w, d, {1, 1},
                                             {0, 0}, {1, 1}, {1, 1});
        dnnl::convolution_forward::primitive_desc pd(desc, engine);
        if (chosen_src != nullptr) *chosen_src = pd.src_desc();
        if (chosen_dst != nullptr) *chosen_dst = pd.dst_desc();
        return std::string(pd.impl_info_str());
      };
      if (const char* forced = std::getenv("KILN_CONV_LAYOUT")) {
        const std::string f = forced;
        if (f == "nhwc") return ir::MemoryLayout::kNhwc;
        if (f == "nChw8c") return ir::MemoryLayout::kNchw8c;
        if (f == "nChw16c") return ir::MemoryLayout::kNchw16c;
        if (f == "plain") return ir::MemoryLayout::kPlain;
        std::fprintf(stderr,
                     "kiln: KILN_CONV_LAYOUT=%s is not nhwc, nChw8c, nChw16c or plain; using "
                     "this CPU's choice\n",
                     forced);
      }
      if (impl_for(memory::format_tag::nhwc, nullptr, nullptr).rfind("brg", 0) == 0) {
        return ir::MemoryLayout::kNhwc;
      }
      memory::desc chosen_src, chosen_dst;
      impl_for(memory::format_tag::any, &chosen_src, &chosen_dst);
      for (auto [tag, layout] : {std::pair{memory::format_tag::nChw8c, ir::MemoryLayout::kNchw8c},
                                 std::pair{memory::format_tag::nChw16c, ir::MemoryLayout::kNchw16c},
                                 std::pair{memory::format_tag::nhwc, ir::MemoryLayout::kNhwc}}) {
        const memory::desc want_src(src, memory::data_type::f32, tag);
        const memory::desc want_dst(dst, memory::data_type::f32, tag);
        if (chosen_src == want_src && chosen_dst == want_dst) return layout;
      }
    } catch (const dnnl::error&) {
    }
    return ir::MemoryLayout::kPlain;
  }();
  return preferred;
}

}  // namespace kiln::kernels
