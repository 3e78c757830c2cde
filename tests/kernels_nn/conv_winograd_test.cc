// Winograd for 3x3 stride-1 fp32 Conv (src/kernels/cpu/nn_conv_winograd.h): against a
// double-precision direct convolution on random data, in the activation layouts plans use,
// with bias, residual and activations; NaN and infinities give exactly what the direct
// convolution gives; KILN_CONV_WINOGRAD=0 really turns it off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/cpu/nn_conv_winograd.h"
#include "kernels/cpu/nn_dnnl.h"
#include "kiln/core/determinism.h"
#include "kiln/core/status.h"
#include "kiln/ir/fused_post_ops.h"
#include "kiln/ir/graph.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

using ir::MemoryLayout;

// Sets KILN_CONV_WINOGRAD for the test's scope (the kernel reads it at Reshape).
class ScopedWinograd {
 public:
  explicit ScopedWinograd(const char* value) {
    const char* old = std::getenv("KILN_CONV_WINOGRAD");
    if (old != nullptr) old_ = old;
    had_ = old != nullptr;
    setenv("KILN_CONV_WINOGRAD", value, 1);
  }
  ~ScopedWinograd() {
    if (had_)
      setenv("KILN_CONV_WINOGRAD", old_.c_str(), 1);
    else
      unsetenv("KILN_CONV_WINOGRAD");
  }

 private:
  bool had_ = false;
  std::string old_;
};

// Position of logical [n, c, h, w] in the bytes of `layout`.
int64_t Offset(MemoryLayout layout, int64_t C, int64_t H, int64_t W, int64_t n, int64_t c,
               int64_t h, int64_t w) {
  switch (layout) {
    case MemoryLayout::kNhwc:
      return ((n * H + h) * W + w) * C + c;
    case MemoryLayout::kNchw8c:
    case MemoryLayout::kNchw16c: {
      const int64_t b = ir::ChannelBlock(layout);
      return (((n * (C / b) + c / b) * H + h) * W + w) * b + c % b;
    }
    default:
      return ((n * C + c) * H + h) * W + w;
  }
}

// `t` (plain NCHW bytes) converted to `from` -> `to` byte order; same logical shape.
Tensor Relayout(const Tensor& t, MemoryLayout from, MemoryLayout to) {
  const int64_t N = t.dim(0), C = t.dim(1), H = t.dim(2), W = t.dim(3);
  Tensor out(DType::kFloat32, t.shape());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t w = 0; w < W; ++w) {
          out.data<float>()[Offset(to, C, H, W, n, c, h, w)] =
              t.data<float>()[Offset(from, C, H, W, n, c, h, w)];
        }
  return out;
}

Tensor Random(const Shape& shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (int64_t i = 0; i < t.num_elements(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

struct Case {
  int64_t n = 1, c = 16, m = 16, h = 8, w = 8, pad = 1, stride = 1;
  bool bias = true, residual = false;
  std::vector<ir::PostOp> post_ops;  // after the residual when there is one
  MemoryLayout layout = MemoryLayout::kPlain;
};

// Runs Conv (or kiln FusedConv with post-ops) the way a plan does: Create with constant W and
// B, Reshape with the activations' layout, Compute. Inputs and output are plain NCHW here.
absl::StatusOr<Tensor> RunConv(const Case& cc, const Tensor& x, const Tensor& w, const Tensor& b,
                               const Tensor& r) {
  const bool fused = cc.residual || !cc.post_ops.empty();
  ir::Graph graph;
  std::vector<ir::ValueId> ins;
  ins.push_back(graph.AddValue("x", ir::TensorType::Of(DType::kFloat32, x.shape().ToVector())));
  graph.inputs.push_back(ins[0]);
  ins.push_back(graph.AddConstant("w", w));
  ins.push_back(cc.bias ? graph.AddConstant("b", b) : ir::kNoValue);
  if (cc.residual) {
    ins.push_back(graph.AddValue("r", ir::TensorType::Of(DType::kFloat32, r.shape().ToVector())));
    graph.inputs.push_back(ins.back());
  }
  std::map<std::string, ir::Attribute> attrs = {
      {"kernel_shape", std::vector<int64_t>{3, 3}},
      {"strides", std::vector<int64_t>{cc.stride, cc.stride}},
      {"pads", std::vector<int64_t>{cc.pad, cc.pad, cc.pad, cc.pad}}};
  if (fused) {
    std::vector<std::string> kinds;
    std::vector<float> alphas;
    if (cc.residual) {
      kinds.push_back(ir::kResidualPostOp);
      alphas.push_back(0);
    }
    for (const ir::PostOp& p : cc.post_ops) {
      kinds.push_back(p.kind);
      alphas.push_back(p.alpha);
    }
    attrs[ir::kPostOpsAttr] = kinds;
    attrs[ir::kPostOpAlphasAttr] = alphas;
  }
  const std::string domain = fused ? ir::kKilnDomain : "";
  const ir::NodeId id =
      graph.AddNode(fused ? ir::kFusedConvOp : "Conv", ins, 1, std::move(attrs), "conv", domain);
  const ir::Node& node = graph.node(id);
  const KernelFactory* factory = KernelRegistry::Global().Find(domain, node.op);
  if (factory == nullptr) return absl::NotFoundError("no Conv kernel");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel, (*factory)(node));

  const Tensor xl = Relayout(x, MemoryLayout::kPlain, cc.layout);
  const Tensor rl = cc.residual ? Relayout(r, MemoryLayout::kPlain, cc.layout) : Tensor();
  std::vector<Tensor> inputs = {xl, w, cc.bias ? b : Tensor()};
  if (cc.residual) inputs.push_back(rl);
  std::vector<InputInfo> infos;
  for (size_t i = 0; i < inputs.size(); ++i) {
    InputInfo info;
    if (inputs[i].valid()) {
      info.dtype = DType::kFloat32;
      info.shape = inputs[i].shape();
      if (i == 1 || i == 2) info.constant = &inputs[i];
      if (i == 0 || i == 3) info.layout = cc.layout;
    }
    infos.push_back(info);
  }
  PackedConstantCache packed;
  CreateContext create;
  create.node = &node;
  create.inputs = infos;
  create.packed_constants = &packed;
  KILN_RETURN_IF_ERROR(kernel->Create(create));
  ReshapeContext reshape;
  reshape.node = &node;
  reshape.created = kernel.get();
  reshape.inputs = infos;
  reshape.packed_constants = &packed;
  reshape.intra_op_threads = 2;
  reshape.output_layouts = {cc.layout};
  KILN_RETURN_IF_ERROR(kernel->Reshape(reshape));
  std::vector<Tensor> outputs = {Tensor(DType::kFloat32, reshape.output_shapes[0])};
  std::vector<char> scratch(reshape.scratch_bytes + 64);
  ComputeContext ctx;
  ctx.inputs = absl::MakeConstSpan(inputs);
  ctx.outputs = absl::MakeSpan(outputs);
  ctx.scratch =
      reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(scratch.data()) + 63) & ~uintptr_t{63});
  ctx.use_openmp = true;
  ctx.intra_op_threads = 2;
  KILN_RETURN_IF_ERROR(kernel->Compute(ctx));
  return Relayout(outputs[0], cc.layout, MemoryLayout::kPlain);
}

// The convolution in double precision, then bias, residual and post-ops (NCHW).
std::vector<double> Reference(const Case& cc, const Tensor& x, const Tensor& w, const Tensor& b,
                              const Tensor& r, int64_t oh, int64_t ow) {
  std::vector<double> y(cc.n * cc.m * oh * ow);
  const float* xv = x.data<float>();
  const float* wv = w.data<float>();
  for (int64_t n = 0; n < cc.n; ++n)
    for (int64_t m = 0; m < cc.m; ++m)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = cc.bias ? b.data<float>()[m] : 0.0;
          for (int64_t c = 0; c < cc.c; ++c)
            for (int64_t ki = 0; ki < 3; ++ki)
              for (int64_t kj = 0; kj < 3; ++kj) {
                const int64_t yi = i * cc.stride + ki - cc.pad, xj = j * cc.stride + kj - cc.pad;
                if (yi < 0 || yi >= cc.h || xj < 0 || xj >= cc.w) continue;
                s += double{xv[((n * cc.c + c) * cc.h + yi) * cc.w + xj]} *
                     wv[((m * cc.c + c) * 3 + ki) * 3 + kj];
              }
          const int64_t at = ((n * cc.m + m) * oh + i) * ow + j;
          if (cc.residual) s += r.data<float>()[at];
          for (const ir::PostOp& p : cc.post_ops) {
            if (p.kind == "Relu") s = s < 0 ? 0 : s;
            if (p.kind == "LeakyRelu") s = s < 0 ? p.alpha * s : s;
          }
          y[at] = s;
        }
  return y;
}

// Whether oneDNN has a Winograd convolution on this CPU (avx512_core; none under an AVX2 cap).
bool OneDnnHasWinograd() {
  try {
    using dnnl::memory;
    const memory::desc any_s({1, 16, 8, 8}, memory::data_type::f32, memory::format_tag::any);
    const memory::desc any_w({16, 16, 3, 3}, memory::data_type::f32, memory::format_tag::any);
    // Kiln's engine: it applies the ISA cap (KILN_MAX_ISA) before any primitive is made.
    dnnl::engine& engine = nn::CpuEngine();
    dnnl::convolution_forward::primitive_desc pd(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                        dnnl::algorithm::convolution_winograd, any_s, any_w, any_s,
                                        {1, 1}, {1, 1}, {1, 1}),
        engine);
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// Whether a Winograd algorithm runs this case when forced: oneDNN's (channels in blocks of 16,
// any layout) where oneDNN has one, else Kiln's own F(4,3) (nChw8c, channels in blocks of 8).
bool WinogradApplies(const Case& cc, bool onednn) {
  const bool own = cc.layout == MemoryLayout::kNchw8c && cc.c % 8 == 0 && cc.m % 8 == 0;
  return own || (onednn && cc.c % 16 == 0 && cc.m % 16 == 0);
}

struct Outputs {
  Tensor winograd, direct;
  std::vector<double> reference;
};

Outputs RunBoth(const Case& cc, uint32_t seed) {
  const Tensor x = Random({cc.n, cc.c, cc.h, cc.w}, seed, -1, 1);
  const float scale = 1.0f / std::sqrt(9.0f * cc.c);
  const Tensor w = Random({cc.m, cc.c, 3, 3}, seed + 1, -scale, scale);
  const Tensor b = Random({cc.m}, seed + 2, -0.5f, 0.5f);
  const int64_t oh = (cc.h + 2 * cc.pad - 3) / cc.stride + 1;
  const int64_t ow = (cc.w + 2 * cc.pad - 3) / cc.stride + 1;
  const Tensor r = cc.residual ? Random({cc.n, cc.m, oh, ow}, seed + 3, -1, 1) : Tensor();
  Outputs out;
  {
    ScopedWinograd on("1");
    auto y = RunConv(cc, x, w, b, r);
    EXPECT_TRUE(y.ok()) << y.status();
    if (y.ok()) out.winograd = *y;
  }
  {
    ScopedWinograd off("0");
    auto y = RunConv(cc, x, w, b, r);
    EXPECT_TRUE(y.ok()) << y.status();
    if (y.ok()) out.direct = *y;
  }
  out.reference = Reference(cc, x, w, b, r, oh, ow);
  return out;
}

// fp32 tolerance: ORT's and TensorFlow's ~1e-4 relative, of the output's magnitude (Winograd's
// error is spread over a tile, so it is bounded relative to the largest output, not each one).
void ExpectClose(const Tensor& y, const std::vector<double>& ref, const char* what) {
  ASSERT_EQ(y.num_elements(), static_cast<int64_t>(ref.size())) << what;
  double max_ref = 0, max_err = 0;
  for (size_t i = 0; i < ref.size(); ++i) max_ref = std::max(max_ref, std::fabs(ref[i]));
  for (size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::fabs(y.data<float>()[i] - ref[i]));
  }
  EXPECT_LE(max_err, 1e-4 * std::max(1.0, max_ref)) << what << ": max |ref| " << max_ref;
}

bool BitEqual(const Tensor& a, const Tensor& b) {
  return a.num_elements() == b.num_elements() &&
         std::memcmp(a.raw_data(), b.raw_data(), a.num_elements() * sizeof(float)) == 0;
}

TEST(ConvWinograd, MatchesDirectOnRandomDataInEveryLayout) {
  const bool available = OneDnnHasWinograd();
  int differed = 0, eligible = 0;
  uint32_t seed = 1;
  for (MemoryLayout layout :
       {MemoryLayout::kPlain, MemoryLayout::kNhwc, MemoryLayout::kNchw8c, MemoryLayout::kNchw16c}) {
    for (int64_t channels : {3, 16, 64}) {
      if (ir::ChannelBlock(layout) != 0 && channels % ir::ChannelBlock(layout) != 0) continue;
      // Partial tiles at the bottom and right (9x7, 13x10), and more tiles than one block of
      // Kiln's own (30x30, batch 2: 128 tiles).
      for (auto [h, w, pad, n] : {std::tuple{8, 8, 1, 1}, std::tuple{9, 7, 0, 3},
                                  std::tuple{13, 10, 1, 1}, std::tuple{30, 30, 1, 2}}) {
        Case cc;
        cc.n = n;
        cc.c = channels;
        cc.m = channels == 3 ? 16 : channels;
        cc.h = h;
        cc.w = w;
        cc.pad = pad;
        cc.layout = layout;
        cc.post_ops = {{"Relu", 0, 0}};
        SCOPED_TRACE(::testing::Message()
                     << ir::MemoryLayoutName(layout) << " C " << cc.c << " K " << cc.m << " " << h
                     << "x" << w << " pad " << pad << " batch " << n);
        const Outputs o = RunBoth(cc, seed++);
        ExpectClose(o.winograd, o.reference, "winograd");
        ExpectClose(o.direct, o.reference, "direct");
        if (WinogradApplies(cc, available)) {
          ++eligible;
          differed += !BitEqual(o.winograd, o.direct);
        } else {
          // Not eligible: the same primitive either way.
          EXPECT_TRUE(BitEqual(o.winograd, o.direct));
        }
      }
    }
  }
  // Winograd rounds differently from the direct sum: the forced runs must show it was used,
  // i.e. that KILN_CONV_WINOGRAD switches the algorithm (in nChw8c at least, on every CPU).
  EXPECT_GT(eligible, 0);
  EXPECT_EQ(differed, eligible) << "KILN_CONV_WINOGRAD=1 vs 0 gave bit-equal outputs";
}

// Kiln's own F(4,3) (nChw8c, channels in blocks of 8 but not 16, so on every CPU) on random
// geometries: sizes from 1 to 19 (partial tiles, images smaller than a tile, padding larger
// than the image's border), batches of 1-3, with and without bias, residual and Relu.
TEST(ConvWinograd, KilnWinogradOnRandomGeometries) {
  std::mt19937 rng(2026);
  auto pick = [&](std::initializer_list<int64_t> values) {
    return *(values.begin() + std::uniform_int_distribution<size_t>(0, values.size() - 1)(rng));
  };
  int ran = 0, differed = 0;
  for (int i = 0; i < 24; ++i) {
    Case cc;
    cc.layout = MemoryLayout::kNchw8c;
    cc.n = pick({1, 2, 3});
    cc.c = pick({8, 24, 40});
    cc.m = pick({8, 24, 40});
    cc.h = std::uniform_int_distribution<int64_t>(1, 19)(rng);
    cc.w = std::uniform_int_distribution<int64_t>(1, 19)(rng);
    cc.pad = pick({0, 1, 2});
    if (cc.h + 2 * cc.pad < 3 || cc.w + 2 * cc.pad < 3) continue;
    cc.bias = i % 3 != 0;
    cc.residual = i % 4 == 1;
    if (i % 2 == 0) cc.post_ops = {{"Relu", 0, 0}};
    SCOPED_TRACE(::testing::Message()
                 << "C " << cc.c << " K " << cc.m << " " << cc.h << "x" << cc.w << " pad " << cc.pad
                 << " batch " << cc.n << " residual " << cc.residual);
    const Outputs o = RunBoth(cc, 1000 + i);
    ExpectClose(o.winograd, o.reference, "winograd");
    ExpectClose(o.direct, o.reference, "direct");
    ++ran;
    differed += !BitEqual(o.winograd, o.direct);
  }
  EXPECT_GT(ran, 16);
  // Forced, Kiln's Winograd ran (its rounding differs from the direct sum's).
  EXPECT_GT(differed, ran / 2);
}

TEST(ConvWinograd, ResidualAndLeakyReluInsideThePrimitive) {
  Case cc;
  cc.n = 2;
  cc.c = 32;
  cc.m = 32;
  cc.h = 14;
  cc.w = 14;
  cc.residual = true;
  cc.post_ops = {{"LeakyRelu", 0.1f, 0}};
  for (MemoryLayout layout : {MemoryLayout::kNhwc, MemoryLayout::kNchw8c, MemoryLayout::kNchw16c}) {
    cc.layout = layout;
    SCOPED_TRACE(ir::MemoryLayoutName(layout));
    const Outputs o = RunBoth(cc, 77);
    ExpectClose(o.winograd, o.reference, "winograd");
    ExpectClose(o.direct, o.reference, "direct");
  }
}

TEST(ConvWinograd, NotAppliedToStridedOrGroupedShapes) {
  Case cc;
  cc.c = cc.m = 32;
  cc.h = cc.w = 12;
  cc.stride = 2;
  cc.layout = MemoryLayout::kNhwc;
  const Outputs o = RunBoth(cc, 5);
  ExpectClose(o.winograd, o.reference, "strided");
  EXPECT_TRUE(BitEqual(o.winograd, o.direct));
}

// NaN and infinities in the input: Winograd's tile transforms would spread them (and turn
// Inf - Inf into NaN); the kernel recomputes directly, so the output is the direct one.
TEST(ConvWinograd, NanAndInfinityGiveTheDirectResult) {
  for (MemoryLayout layout : {MemoryLayout::kNhwc, MemoryLayout::kNchw8c, MemoryLayout::kNchw16c}) {
    for (bool residual : {false, true}) {
      Case cc;
      cc.n = 1;
      cc.c = cc.m = 16;
      cc.h = cc.w = 12;
      cc.layout = layout;
      cc.residual = residual;
      SCOPED_TRACE(::testing::Message()
                   << ir::MemoryLayoutName(layout) << " residual " << residual);
      Tensor x = Random({1, 16, 12, 12}, 9, -1, 1);
      const Tensor w = Random({16, 16, 3, 3}, 10, -0.1f, 0.1f);
      const Tensor b = Random({16}, 11, -0.5f, 0.5f);
      const Tensor r = residual ? Random({1, 16, 12, 12}, 12, -1, 1) : Tensor();
      x.data<float>()[(3 * 12 + 2) * 12 + 5] = std::numeric_limits<float>::quiet_NaN();
      x.data<float>()[(7 * 12 + 9) * 12 + 1] = std::numeric_limits<float>::infinity();
      x.data<float>()[(7 * 12 + 9) * 12 + 10] = -std::numeric_limits<float>::infinity();
      Tensor on, off;
      {
        ScopedWinograd s("1");
        auto y = RunConv(cc, x, w, b, r);
        ASSERT_TRUE(y.ok()) << y.status();
        on = *y;
      }
      {
        ScopedWinograd s("0");
        auto y = RunConv(cc, x, w, b, r);
        ASSERT_TRUE(y.ok()) << y.status();
        off = *y;
      }
      int nans = 0, infs = 0;
      for (int64_t i = 0; i < off.num_elements(); ++i) {
        const float a = on.data<float>()[i], d = off.data<float>()[i];
        ASSERT_EQ(std::isnan(a), std::isnan(d)) << "at " << i << ": " << a << " vs " << d;
        ASSERT_EQ(std::isinf(a), std::isinf(d)) << "at " << i << ": " << a << " vs " << d;
        if (std::isinf(d)) {
          ASSERT_EQ(a, d) << "at " << i;
        }
        if (std::isfinite(d)) {
          ASSERT_NEAR(a, d, 1e-4) << "at " << i;
        }
        nans += std::isnan(d);
        infs += std::isinf(d);
      }
      // The direct result has both, in the neighbourhoods of the bad inputs only.
      EXPECT_GT(nans, 0);
      EXPECT_GT(infs, 0);
      EXPECT_LT(nans + infs, off.num_elements() / 4);
    }
  }
}

TEST(ConvWinograd, SwitchIsParsedAndABadValueIsAnError) {
  {
    ScopedWinograd s("off");
    EXPECT_EQ(*nn::ReadWinogradMode(), nn::WinogradMode::kOff);
  }
  {
    ScopedWinograd s("ON");
    EXPECT_EQ(*nn::ReadWinogradMode(), nn::WinogradMode::kOn);
  }
  {
    ScopedWinograd s("auto");
    EXPECT_EQ(*nn::ReadWinogradMode(), nn::WinogradMode::kAuto);
  }
  ScopedWinograd s("maybe");
  EXPECT_FALSE(nn::ReadWinogradMode().ok());
  Case cc;
  cc.c = cc.m = 16;
  const Tensor x = Random({1, 16, 8, 8}, 1, -1, 1), w = Random({16, 16, 3, 3}, 2, -1, 1),
               b = Random({16}, 3, -1, 1);
  auto y = RunConv(cc, x, w, b, Tensor());
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("KILN_CONV_WINOGRAD"), std::string::npos) << y.status();
}

// Under op determinism (TF_DETERMINISTIC_OPS=1) the automatic choice is not timed: the direct
// convolution, so two loads of one model compute the same bits. Last in the file: determinism
// stays on in this process.
TEST(ConvWinograd, OpDeterminismKeepsTheAutomaticChoiceDirect) {
  EnableOpDeterminism();
  Case cc;
  cc.c = cc.m = 64;
  cc.h = cc.w = 28;  // 29M multiply-adds: timed when determinism is off
  cc.layout = MemoryLayout::kNchw16c;
  const Tensor x = Random({1, 64, 28, 28}, 21, -1, 1);
  const Tensor w = Random({64, 64, 3, 3}, 22, -0.05f, 0.05f);
  const Tensor b = Random({64}, 23, -0.5f, 0.5f);
  Tensor automatic, direct;
  {
    ScopedWinograd s("auto");
    auto y = RunConv(cc, x, w, b, Tensor());
    ASSERT_TRUE(y.ok()) << y.status();
    automatic = *y;
  }
  {
    ScopedWinograd s("0");
    auto y = RunConv(cc, x, w, b, Tensor());
    ASSERT_TRUE(y.ok()) << y.status();
    direct = *y;
  }
  EXPECT_TRUE(BitEqual(automatic, direct));
}

}  // namespace
}  // namespace kiln::kernels
