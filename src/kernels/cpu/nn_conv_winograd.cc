#include "nn_conv_winograd.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <unordered_map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "kiln/core/determinism.h"
#include "kiln/core/status.h"
#include "kiln/kernels/conv_layout.h"
#include "nn_dnnl.h"

namespace kiln::kernels::nn {
namespace {

using dnnl::memory;

// Winograd must beat direct by this much to be taken: it changes the rounding, so a tie (or a
// timing decided by noise from other processes) keeps the direct convolution.
constexpr double kMinWinogradGain = 1.05;
// The timing allocates X, Y, both weight layouts and both scratchpads before the plan's memory
// budget is checked: above this the convolution stays direct untimed, so that a model's shapes
// cannot drive a large allocation here.
constexpr size_t kMaxTimedBytes = size_t{256} << 20;
// Inputs below this many multiply-adds stay direct untimed: a choice between two runs of a few
// microseconds would be decided by noise, and there is nothing to gain.
constexpr int64_t kMinWinogradMacs = int64_t{1} << 20;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One timing candidate: the primitive, with reorders from and to the plan's layouts when it
// chose others, on zero-filled buffers oneDNN allocates.
struct TimedConv {
  dnnl::convolution_forward conv;
  std::optional<dnnl::reorder> x_in, y_out;
  memory user_x, user_y, x, y, w, bias, scratchpad;
  // The residual of a fused Add, written into the destination before the run as Compute does:
  // reordered when the primitive's destination layout is not the plan's, else copied (or
  // nothing, where the plan runs the convolution in place of the residual).
  std::optional<dnnl::reorder> r_in;
  memory user_r;
  bool copy_r = false;
};

size_t CandidateBytes(const dnnl::convolution_forward::primitive_desc& pd, const memory::desc& ux,
                      const memory::desc& uy) {
  size_t bytes = pd.weights_desc().get_size() + pd.scratchpad_desc().get_size();
  if (pd.src_desc() != ux) bytes += pd.src_desc().get_size();
  if (pd.dst_desc() != uy) bytes += pd.dst_desc().get_size();
  return bytes;
}

memory ZeroMemory(const memory::desc& d, const dnnl::engine& engine) {
  memory m(d, engine);
  if (d.get_size() > 0) std::memset(m.get_data_handle(), 0, d.get_size());
  return m;
}

TimedConv MakeTimed(const dnnl::convolution_forward::primitive_desc& pd, const memory& user_x,
                    const memory& user_y, const memory::desc& bias, const memory* user_r) {
  auto& engine = CpuEngine();
  TimedConv t{dnnl::convolution_forward(pd),
              std::nullopt,
              std::nullopt,
              user_x,
              user_y,
              pd.src_desc() != user_x.get_desc() ? ZeroMemory(pd.src_desc(), engine) : user_x,
              pd.dst_desc() != user_y.get_desc() ? ZeroMemory(pd.dst_desc(), engine) : user_y,
              ZeroMemory(pd.weights_desc(), engine),
              memory(),
              ZeroMemory(pd.scratchpad_desc(), engine)};
  if (bias) t.bias = ZeroMemory(bias, engine);
  if (pd.src_desc() != user_x.get_desc()) t.x_in = dnnl::reorder(user_x, t.x);
  if (pd.dst_desc() != user_y.get_desc()) t.y_out = dnnl::reorder(t.y, user_y);
  if (user_r != nullptr) {
    t.user_r = *user_r;
    if (pd.dst_desc() != user_r->get_desc()) {
      t.r_in = dnnl::reorder(t.user_r, t.y);
    } else {
      t.copy_r = pd.dst_desc() != user_y.get_desc();
    }
  }
  return t;
}

// A memory descriptor as a cache key: dims, strides and inner blocks say its layout.
std::string DescKey(const memory::desc& d) {
  const dnnl_memory_desc_t& c = d.data;
  std::string key = absl::StrCat(c.ndims, ":");
  for (int i = 0; i < c.ndims; ++i) {
    absl::StrAppend(&key, c.dims[i], "/", c.format_desc.blocking.strides[i], ",");
  }
  for (int i = 0; i < c.format_desc.blocking.inner_nblks; ++i) {
    absl::StrAppend(&key, "b", c.format_desc.blocking.inner_idxs[i], "x",
                    c.format_desc.blocking.inner_blks[i]);
  }
  return key;
}

// A Winograd weight layout as a cache key: oneDNN's wino formats are not blocked ones, so
// DescKey does not tell them apart; their parameters do.
std::string WinoKey(const memory::desc& d) {
  const dnnl_wino_desc_t& w = d.data.format_desc.wino_desc;
  return absl::StrCat("wino", static_cast<int>(w.wino_format), ":", w.r, ":", w.alpha, ":", w.ic,
                      ":", w.oc, ":", w.ic_block, ":", w.oc_block, ":", w.ic2_block, ":",
                      w.oc2_block, ":", w.size);
}

// Transformed weight layouts one node may pack. oneDNN picks the Winograd weight layout from
// the batch size, and one layout serves a range of batch sizes (on avx512_core: F(2,3)'s for
// batches 1-2, F(4,3)'s in one or two ranges above); ResNet-18 at batch sizes 1 to 64 needs 3.
// Each is 1.8x (F(2,3)) or 4x (F(4,3)) the plain weights.
constexpr int kMaxWinogradLayouts = 3;

// The timed decision, kept in the model's PackedConstantCache: convolutions of one shape,
// layouts and post-ops (ResNet's repeated blocks) are timed once per model.
struct TimedChoice {
  bool winograd = false;
  std::string why;
};

using ChoiceAndBytes = std::pair<std::shared_ptr<const TimedChoice>, size_t>;

ChoiceAndBytes Chose(std::string why) {
  auto choice = std::make_shared<TimedChoice>();
  choice->why = std::move(why);
  return {std::move(choice), 0};
}

// The decision from the best times of both, printed once per model and shape (the cache), as
// the GEMM backend's line: what a model load and `kiln inspect` show.
ChoiceAndBytes TimedDecision(double direct_s, const char* direct_impl, double winograd_s,
                             const char* winograd_impl, const WinogradQuery& q) {
  auto choice = std::make_shared<TimedChoice>();
  choice->winograd = direct_s > winograd_s * kMinWinogradGain;
  choice->why = absl::StrFormat("%s (timed: direct %s %.3f ms, winograd %s %.3f ms)",
                                choice->winograd ? "winograd" : "direct", direct_impl,
                                direct_s * 1e3, winograd_impl, winograd_s * 1e3);
  std::fprintf(stderr, "kiln: fp32 Conv 3x3 %s -> %lld channels on %d threads: %s\n",
               absl::StrJoin(q.user_x.dims(), "x").c_str(), static_cast<long long>(q.m), q.threads,
               choice->why.c_str());
  return {std::move(choice), 0};
}

// `decide` once per `key` in the model's cache (kept per shape, layouts and post-ops, so
// ResNet's repeated blocks are timed once), or on every call without a cache. The key ends
// with what every algorithm shares: the threads, bias, residual, layouts, pads.
absl::StatusOr<std::shared_ptr<const TimedChoice>> DecideOnce(
    const WinogradQuery& q, std::string key,
    absl::FunctionRef<absl::StatusOr<ChoiceAndBytes>()> decide) {
  if (q.cache == nullptr) {
    KILN_ASSIGN_OR_RETURN(ChoiceAndBytes made, decide());
    return made.first;
  }
  absl::StrAppend(&key, ":", q.threads, ":", q.has_residual, ":", DescKey(q.user_x), ":",
                  DescKey(q.user_y), ":", DescKey(q.user_w), ":", q.bias ? 1 : 0, ":pads",
                  absl::StrJoin(q.pads_begin, ","), ";", absl::StrJoin(q.pads_end, ","));
  return q.cache->GetOrCreate<TimedChoice>(nullptr, key, decide);
}

// Why the automatic choice keeps `q` direct without timing it, or null.
const char* UntimedDirect(const WinogradQuery& q) {
  const memory::dims y_dims = q.user_y.dims();
  if (y_dims[0] * y_dims[2] * y_dims[3] * q.m * q.c * 9 < kMinWinogradMacs) {
    return "direct (too small to gain)";
  }
  // Winograd rounds differently from direct, and timings can differ between two loads.
  if (OpDeterminismEnabled()) return "direct (op determinism: not timed)";
  return nullptr;
}

double RunOnce(TimedConv& t, bool scan, int threads, dnnl::stream& stream) {
  const double start = Seconds();
  if (t.x_in) t.x_in->execute(stream, t.user_x, t.x);
  if (t.r_in) t.r_in->execute(stream, t.user_r, t.y);
  if (t.copy_r) {
    std::memcpy(t.y.get_data_handle(), t.user_r.get_data_handle(), t.y.get_desc().get_size());
  }
  std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, t.x},
                                          {DNNL_ARG_WEIGHTS, t.w},
                                          {DNNL_ARG_DST, t.y},
                                          {DNNL_ARG_SCRATCHPAD, t.scratchpad}};
  if (t.bias) args[DNNL_ARG_BIAS] = t.bias;
  t.conv.execute(stream, args);
  if (t.y_out) t.y_out->execute(stream, t.y, t.user_y);
  stream.wait();
  // Winograd's run includes the scan for NaN and infinities that Compute adds to it.
  if (scan) {
    AllFinite(static_cast<const float*>(t.user_y.get_data_handle()),
              static_cast<int64_t>(t.user_y.get_desc().get_size() / sizeof(float)), threads);
  }
  return Seconds() - start;
}

// Kiln's F(4,3) and then every post-op, in chunks on `threads` threads; false when the
// convolution gave a non-finite value (the post-ops are then not applied). The residual sum and
// Relu inside the output transform instead were measured no faster (ResNet-18 capped to AVX2,
// batch 32, three interleaved rounds: 250.6 / 259.7 / 254.0 ms fused, 250.4 / 253.6 / 250.3
// ms as this pass), so the pass stays, one code path for every post-op.
bool RunOwnOn(const WinogradF43& run, const WinogradF43Weights& weights,
              const std::vector<ir::PostOp>& post_ops, const float* x, const float* bias,
              const float* residual, float* y, char* scratch, int threads) {
  if (!run.Run(weights, x, bias, y, scratch)) return false;
  if (!post_ops.empty()) {
    OpenMpParallelFor(
        run.output_floats(), int64_t{1} << 16, threads, [&](int64_t begin, int64_t end) {
          ApplyPostOpsInOrder(post_ops, residual != nullptr ? residual + begin : nullptr, y + begin,
                              end - begin);
        });
  }
  return true;
}

}  // namespace

absl::StatusOr<WinogradMode> ReadWinogradMode() {
  const char* value = std::getenv("KILN_CONV_WINOGRAD");
  if (value == nullptr) return WinogradMode::kAuto;
  const std::string v = absl::AsciiStrToLower(value);
  if (v.empty() || v == "auto") return WinogradMode::kAuto;
  if (v == "0" || v == "off") return WinogradMode::kOff;
  if (v == "1" || v == "on") return WinogradMode::kOn;
  return absl::InvalidArgumentError(
      absl::StrCat("KILN_CONV_WINOGRAD=", value, " is not one of auto, 0, off, 1, on"));
}

bool AllFinite(const float* data, int64_t n, int threads) {
  // One flag per chunk, OR-ed without branches so the loop vectorizes; written only by the
  // chunk's own thread.
  bool finite = true;
  OpenMpParallelFor(n, int64_t{1} << 16, threads, [&](int64_t begin, int64_t end) {
    uint32_t bad = 0;
    for (int64_t i = begin; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, sizeof(bits));
      bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (bad != 0) __atomic_store_n(&finite, false, __ATOMIC_RELAXED);
  });
  return finite;
}

absl::Status ConvWinograd::Choose(const WinogradQuery& q) {
  active_ = false;
  fallback_ = dnnl::primitive();
  winograd_desc_.reset();
  own_weights_.reset();
  own_.reset();
  why_ = "direct";
  KILN_ASSIGN_OR_RETURN(const WinogradMode mode, ReadWinogradMode());
  if (q.creating) return absl::OkStatus();
  if (mode == WinogradMode::kOff) {
    why_ = "direct (KILN_CONV_WINOGRAD=0)";
    return absl::OkStatus();
  }
  // Winograd: 2-D, 3x3, stride 1, no dilation, no groups.
  const bool geometry = q.kernel.size() == 2 && q.kernel[0] == 3 && q.kernel[1] == 3 &&
                        q.strides == std::vector<int64_t>{1, 1} &&
                        q.dilations == std::vector<int64_t>{1, 1} && q.group == 1 && q.c > 0 &&
                        q.m > 0;
  if (!geometry) return absl::OkStatus();
  // Transformed weights are packed once; weights known only per run, or with a NaN or infinity
  // (which the weight transform would spread over the whole 3x3 kernel), stay direct.
  if (q.w == nullptr || q.w->constant == nullptr) return absl::OkStatus();
  const Tensor& w = *q.w->constant;
  if (!AllFinite(w.data<float>(), w.num_elements(), q.threads)) {
    why_ = "direct (weights not finite)";
    return absl::OkStatus();
  }
  // oneDNN's needs channels in whole blocks of 16, so that the output's bytes (scanned for
  // NaN) hold no padding in any layout.
  if (q.c % 16 != 0 || q.m % 16 != 0) return ChooseOwn(q, mode);
  // The post-ops inside the primitive must keep a non-finite value non-finite, or the scan
  // could miss one (nn_conv_winograd.h): the sum and LeakyRelu with a positive slope do.
  const size_t inside = q.post_ops->size() - q.epilogue->size();
  for (size_t i = 0; i < inside; ++i) {
    const ir::PostOp& p = (*q.post_ops)[i];
    if (p.kind != ir::kResidualPostOp && !(p.kind == "LeakyRelu" && p.alpha > 0.0f)) {
      return absl::OkStatus();
    }
  }
  // The fallback copies the residual into Y's bytes before summing: same layout only.
  if (q.has_residual && q.user_r != q.user_y) return absl::OkStatus();

  auto& engine = CpuEngine();
  std::optional<dnnl::convolution_forward::desc> winograd;
  std::optional<dnnl::convolution_forward::primitive_desc> winograd_pd;
  const memory::desc any_x(q.user_x.dims(), memory::data_type::f32, memory::format_tag::any);
  const memory::desc any_w(q.user_w.dims(), memory::data_type::f32, memory::format_tag::any);
  const memory::desc any_y(q.user_y.dims(), memory::data_type::f32, memory::format_tag::any);
  try {
    winograd.emplace(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd,
                     any_x, any_w, q.bias, any_y, q.strides_dnnl, q.dilations_dnnl, q.pads_begin,
                     q.pads_end);
    winograd_pd.emplace(*winograd, *q.attr, engine);
  } catch (const dnnl::error&) {
    return ChooseOwn(q, mode);
  }
  // The transformed weights are packed once per layout and node, and shared by every plan that
  // uses that layout: a layout an earlier plan of the model packed is used when oneDNN takes it
  // for this batch size; otherwise this plan's own layout takes a free slot, if one is left
  // (else it stays direct), so compiling plans for more batch sizes packs at most
  // kMaxWinogradLayouts copies. Until 6f311fb a node had one layout: after a batch-1 plan,
  // ResNet-18's batch-32 plan stayed direct and ran 219-227 ms instead of 175-177.
  int free_slot = -1;  // the slot this plan's own layout would take; -1: uses a packed one
  if (q.cache != nullptr && q.node != nullptr) {
    const memory::desc natural = winograd_pd->weights_desc();
    bool fits = false;
    for (int i = 0; i < kMaxWinogradLayouts && !fits; ++i) {
      const auto packed =
          q.cache->Find<memory::desc>(q.node, absl::StrCat("conv-winograd-weights:", i));
      if (packed == nullptr) {
        free_slot = i;
        break;
      }
      if (*packed == natural) {
        fits = true;
        break;
      }
      try {
        dnnl::convolution_forward::desc forced(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_winograd, any_x,
            *packed, q.bias, any_y, q.strides_dnnl, q.dilations_dnnl, q.pads_begin, q.pads_end);
        dnnl::convolution_forward::primitive_desc forced_pd(forced, *q.attr, engine);
        if (forced_pd.weights_desc() == *packed) {
          winograd.emplace(forced);
          winograd_pd.emplace(forced_pd);
          fits = true;
        }
      } catch (const dnnl::error&) {
        // oneDNN does not run this batch size on that layout: the next one.
      }
    }
    if (!fits && free_slot < 0) {
      why_ = absl::StrCat("direct (this node's Winograd weights are packed in ",
                          kMaxWinogradLayouts, " layouts, none for this batch size)");
      return absl::OkStatus();
    }
  }
  // The fallback: direct, on the plan's layouts and the weights' plain bytes (it runs only
  // when an output is not finite, so it needs no packed weights of its own).
  std::optional<dnnl::convolution_forward::primitive_desc> fallback_pd;
  try {
    dnnl::primitive_attr attr = *q.attr;  // user scratchpad and the same post-ops
    fallback_pd.emplace(
        dnnl::convolution_forward::desc(
            dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, q.user_x,
            q.user_w, q.bias, q.user_y, q.strides_dnnl, q.dilations_dnnl, q.pads_begin, q.pads_end),
        attr, engine);
  } catch (const dnnl::error&) {
    return absl::OkStatus();
  }

  bool take = mode == WinogradMode::kOn;
  if (!take) {
    if (const char* why = UntimedDirect(q)) {
      why_ = why;
      return absl::OkStatus();
    }
    auto decide = [&]() -> absl::StatusOr<ChoiceAndBytes> {
      const dnnl::convolution_forward::primitive_desc direct_pd(*q.direct, *q.attr, engine);
      const size_t bytes = q.user_x.get_size() + q.user_y.get_size() +
                           (q.has_residual ? q.user_r.get_size() : 0) +
                           CandidateBytes(direct_pd, q.user_x, q.user_y) +
                           CandidateBytes(*winograd_pd, q.user_x, q.user_y);
      if (bytes > kMaxTimedBytes) return Chose("direct (too large to time)");
      ScopedDnnlThreads threads(q.threads);
      auto& stream = ThreadStream();
      const memory user_x = ZeroMemory(q.user_x, engine);
      const memory user_y = ZeroMemory(q.user_y, engine);
      const memory user_r = q.has_residual ? ZeroMemory(q.user_r, engine) : memory();
      const memory* residual = q.has_residual ? &user_r : nullptr;
      TimedConv direct_run = MakeTimed(direct_pd, user_x, user_y, q.bias, residual);
      TimedConv winograd_run = MakeTimed(*winograd_pd, user_x, user_y, q.bias, residual);
      // One warm-up each, then the best of three, interleaved so that load from other
      // processes falls on both.
      RunOnce(direct_run, false, q.threads, stream);
      RunOnce(winograd_run, true, q.threads, stream);
      double direct_s = 1e30, winograd_s = 1e30;
      for (int i = 0; i < 3; ++i) {
        direct_s = std::min(direct_s, RunOnce(direct_run, false, q.threads, stream));
        winograd_s = std::min(winograd_s, RunOnce(winograd_run, true, q.threads, stream));
      }
      return TimedDecision(direct_s, direct_pd.impl_info_str(), winograd_s,
                           winograd_pd->impl_info_str(), q);
    };
    std::string key = absl::StrCat("conv-winograd:", WinoKey(winograd_pd->weights_desc()));
    for (size_t i = 0; i < inside; ++i) {
      absl::StrAppend(&key, ":", (*q.post_ops)[i].kind, (*q.post_ops)[i].alpha);
    }
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const TimedChoice> choice,
                          DecideOnce(q, std::move(key), decide));
    take = choice->winograd;
    why_ = choice->why;
  } else {
    why_ = absl::StrCat("winograd ", winograd_pd->impl_info_str(), " (KILN_CONV_WINOGRAD=1)");
  }
  if (take && free_slot >= 0) {
    // This plan's own layout takes the free slot; if another plan compiling at the same time
    // took it first with another layout, this one stays direct.
    const memory::desc layout = winograd_pd->weights_desc();
    KILN_ASSIGN_OR_RETURN(
        std::shared_ptr<const memory::desc> claimed,
        q.cache->GetOrCreate<memory::desc>(
            q.node, absl::StrCat("conv-winograd-weights:", free_slot),
            [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const memory::desc>, size_t>> {
              return std::make_pair(std::make_shared<const memory::desc>(layout), size_t{0});
            }));
    if (*claimed != layout) {
      take = false;
      why_ = absl::StrCat("direct (", why_, "; another plan took this node's free layout slot)");
    }
  }
  if (!take) return absl::OkStatus();
  active_ = true;
  winograd_desc_ = winograd;
  user_x_ = q.user_x;
  user_y_ = q.user_y;
  user_w_ = q.user_w;
  bias_ = q.bias;
  fallback_scratch_ = fallback_pd->scratchpad_desc();
  fallback_ = dnnl::convolution_forward(*fallback_pd);
  return absl::OkStatus();
}

absl::Status ConvWinograd::ChooseOwn(const WinogradQuery& q, WinogradMode mode) {
  why_ = "direct (oneDNN has no Winograd here)";
  // Kiln's F(4,3) reads and writes nChw8c, the residual in Y's layout.
  if (q.x_layout != ir::MemoryLayout::kNchw8c || q.y_layout != ir::MemoryLayout::kNchw8c ||
      (q.has_residual && q.r_layout != ir::MemoryLayout::kNchw8c)) {
    return absl::OkStatus();
  }
  const memory::dims x_dims = q.user_x.dims(), y_dims = q.user_y.dims();
  WinogradF43Shape shape;
  shape.n = x_dims[0];
  shape.c = q.c;
  shape.k = q.m;
  shape.h = x_dims[2];
  shape.w = x_dims[3];
  shape.out_h = y_dims[2];
  shape.out_w = y_dims[3];
  shape.pad_top = q.pads_begin[0];
  shape.pad_left = q.pads_begin[1];
  if (!WinogradF43::Supports(shape)) return absl::OkStatus();
  if (mode != WinogradMode::kOn) {
    if (const char* why = UntimedDirect(q)) {
      why_ = why;
      return absl::OkStatus();
    }
  }
  constexpr const char* kImpl = "kiln_wino_4x3:avx2";
  // The transformed weights are 4x the plain ones (36 of 9 values per channel pair): above
  // the timing's bound, stay direct rather than allocate them.
  if (static_cast<double>(WinogradF43Weights::kPoints) * q.c * q.m * sizeof(float) >
      static_cast<double>(kMaxTimedBytes)) {
    why_ = "direct (Winograd weights too large)";
    return absl::OkStatus();
  }
  // The node's transformed weights: made once per model when a plan first needs them (to
  // time or to run), kept in the model's store only when a plan takes them. Without the memory
  // for them the convolution stays direct.
  const std::string weights_key = "conv-winograd-f43-weights";
  std::shared_ptr<const WinogradF43Weights> weights =
      q.cache != nullptr ? q.cache->Find<WinogradF43Weights>(q.node, weights_key) : nullptr;
  auto have_weights = [&]() -> absl::StatusOr<bool> {
    if (weights != nullptr) return true;
    absl::StatusOr<std::shared_ptr<const WinogradF43Weights>> made =
        WinogradF43Weights::Make(q.w->constant->data<float>(), q.m, q.c);
    if (absl::IsResourceExhausted(made.status())) return false;
    if (!made.ok()) return made.status();
    weights = *std::move(made);
    return true;
  };
  const WinogradF43 run(shape, q.threads);
  bool take = mode == WinogradMode::kOn;
  if (!take) {
    auto decide = [&]() -> absl::StatusOr<ChoiceAndBytes> {
      auto& engine = CpuEngine();
      const dnnl::convolution_forward::primitive_desc direct_pd(*q.direct, *q.attr, engine);
      const size_t bytes = q.user_x.get_size() + 2 * q.user_y.get_size() +
                           (q.has_residual ? q.user_r.get_size() : 0) +
                           CandidateBytes(direct_pd, q.user_x, q.user_y) + run.scratch_bytes();
      if (bytes > kMaxTimedBytes) return Chose("direct (too large to time)");
      KILN_ASSIGN_OR_RETURN(const bool made, have_weights());
      if (!made) return Chose("direct (no memory for Winograd weights)");
      ScopedDnnlThreads threads(q.threads);
      auto& stream = ThreadStream();
      const memory user_x = ZeroMemory(q.user_x, engine);
      const memory user_y = ZeroMemory(q.user_y, engine);
      const memory user_r = q.has_residual ? ZeroMemory(q.user_r, engine) : memory();
      TimedConv direct_run =
          MakeTimed(direct_pd, user_x, user_y, q.bias, q.has_residual ? &user_r : nullptr);
      // Kiln's run, as Compute makes it: the transform, products and post-ops.
      const memory scratch = ZeroMemory(
          memory::desc({static_cast<memory::dim>(run.scratch_bytes() / sizeof(float) + 16)},
                       memory::data_type::f32, memory::format_tag::a),
          engine);
      const memory bias = q.bias ? ZeroMemory(q.bias, engine) : memory();
      char* scratch_bytes = static_cast<char*>(scratch.get_data_handle());
      scratch_bytes += (64 - reinterpret_cast<uintptr_t>(scratch_bytes) % 64) % 64;
      auto own_once = [&] {
        const double start = Seconds();
        const float* r =
            q.has_residual ? static_cast<const float*>(user_r.get_data_handle()) : nullptr;
        RunOwnOn(run, *weights, *q.post_ops, static_cast<const float*>(user_x.get_data_handle()),
                 q.bias ? static_cast<const float*>(bias.get_data_handle()) : nullptr, r,
                 static_cast<float*>(user_y.get_data_handle()), scratch_bytes, q.threads);
        return Seconds() - start;
      };
      RunOnce(direct_run, false, q.threads, stream);
      own_once();
      double direct_s = 1e30, own_s = 1e30;
      for (int i = 0; i < 3; ++i) {
        direct_s = std::min(direct_s, RunOnce(direct_run, false, q.threads, stream));
        own_s = std::min(own_s, own_once());
      }
      return TimedDecision(direct_s, direct_pd.impl_info_str(), own_s, kImpl, q);
    };
    std::string key = "conv-winograd-f43";
    for (const ir::PostOp& p : *q.post_ops) absl::StrAppend(&key, ":", p.kind, p.alpha, p.beta);
    KILN_ASSIGN_OR_RETURN(std::shared_ptr<const TimedChoice> choice,
                          DecideOnce(q, std::move(key), decide));
    take = choice->winograd;
    why_ = choice->why;
  } else {
    why_ = absl::StrCat("winograd ", kImpl, " (KILN_CONV_WINOGRAD=1)");
  }
  if (!take) return absl::OkStatus();
  KILN_ASSIGN_OR_RETURN(const bool made, have_weights());
  if (!made) {
    why_ = "direct (no memory for Winograd weights)";
    return absl::OkStatus();
  }
  if (q.cache != nullptr) {
    // Counted once per model, in its packed bytes (another plan may have stored them first).
    KILN_ASSIGN_OR_RETURN(
        weights,
        q.cache->GetOrCreate<WinogradF43Weights>(
            q.node, weights_key,
            [&]() -> absl::StatusOr<std::pair<std::shared_ptr<const WinogradF43Weights>, size_t>> {
              return std::make_pair(weights, weights->bytes());
            }));
  }
  own_weights_ = std::move(weights);
  own_.emplace(run);
  own_post_ops_ = *q.post_ops;
  return absl::OkStatus();
}

void ConvWinograd::ReserveScratch(size_t* offset) {
  if (own()) {
    own_offset_ = *offset;
    *offset += Align64(own_->scratch_bytes());
    return;
  }
  if (!active_) return;
  fallback_offset_ = *offset;
  *offset += Align64(fallback_scratch_.get_size());
}

bool ConvWinograd::RunOwn(const float* x, const float* bias, const float* residual, float* y,
                          char* scratch, int threads) const {
  return RunOwnOn(*own_, *own_weights_, own_post_ops_, x, bias, residual, y, scratch + own_offset_,
                  threads);
}

bool ConvWinograd::RecomputeIfNotFinite(const void* x, const void* w, const void* bias,
                                        const void* residual, void* y, char* scratch, int threads,
                                        dnnl::stream& stream) const {
  const size_t y_bytes = user_y_.get_size();
  if (AllFinite(static_cast<const float*>(y), static_cast<int64_t>(y_bytes / sizeof(float)),
                threads)) {
    return false;
  }
  // The residual's bytes are the input's own (Reshape keeps Y out of its memory while
  // Winograd is active), so they still hold the residual.
  if (residual != nullptr) std::memcpy(y, residual, y_bytes);
  const RawMemory xm(user_x_, x), wm(user_w_, w), ym(user_y_, y),
      sm(fallback_scratch_, scratch + fallback_offset_);
  if (bias != nullptr) {
    const RawMemory bm(bias_, bias);
    ExecutePrimitive(fallback_, stream,
                     {{DNNL_ARG_SRC, xm.get()},
                      {DNNL_ARG_WEIGHTS, wm.get()},
                      {DNNL_ARG_BIAS, bm.get()},
                      {DNNL_ARG_DST, ym.get()},
                      {DNNL_ARG_SCRATCHPAD, sm.get()}});
  } else {
    ExecutePrimitive(fallback_, stream,
                     {{DNNL_ARG_SRC, xm.get()},
                      {DNNL_ARG_WEIGHTS, wm.get()},
                      {DNNL_ARG_DST, ym.get()},
                      {DNNL_ARG_SCRATCHPAD, sm.get()}});
  }
  stream.wait();
  return true;
}

}  // namespace kiln::kernels::nn

namespace kiln::kernels {

bool ConvWinogradEnabled() {
  const absl::StatusOr<nn::WinogradMode> mode = nn::ReadWinogradMode();
  return mode.ok() && *mode != nn::WinogradMode::kOff;
}

// oneDNN's Winograd reads and writes blocked memory only (nChw16c on avx512_core), whatever
// the plan's layout; asked once for a ResNet-like 64-channel 56x56 convolution.
ir::MemoryLayout WinogradConvActivationLayout() {
  static const ir::MemoryLayout layout = [] {
    using dnnl::memory;
    try {
      const memory::dims src{1, 64, 56, 56}, wei{64, 64, 3, 3};
      const memory::desc any_src(src, memory::data_type::f32, memory::format_tag::any);
      const memory::desc any_w(wei, memory::data_type::f32, memory::format_tag::any);
      const dnnl::convolution_forward::primitive_desc pd(
          dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference,
                                          dnnl::algorithm::convolution_winograd, any_src, any_w,
                                          any_src, {1, 1}, {1, 1}, {1, 1}),
          nn::CpuEngine());
      for (auto [tag, kiln_layout] :
           {std::pair{memory::format_tag::nChw16c, ir::MemoryLayout::kNchw16c},
            std::pair{memory::format_tag::nChw8c, ir::MemoryLayout::kNchw8c}}) {
        const memory::desc want(src, memory::data_type::f32, tag);
        if (pd.src_desc() == want && pd.dst_desc() == want) return kiln_layout;
      }
    } catch (const dnnl::error&) {
    }
    return ir::MemoryLayout::kPlain;
  }();
  // A forced layout is measured as is; without Winograd the layout would buy nothing.
  const absl::StatusOr<nn::WinogradMode> mode = nn::ReadWinogradMode();
  if (std::getenv("KILN_CONV_LAYOUT") != nullptr || !mode.ok() || *mode == nn::WinogradMode::kOff) {
    return ir::MemoryLayout::kPlain;
  }
  return layout;
}

}  // namespace kiln::kernels
