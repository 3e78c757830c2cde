// MatMul (numpy semantics, batched, broadcasting), Gemm (alpha, beta, transA, transB, C with
// unidirectional broadcast) and the optimizer's "kiln" FusedMatMul / FusedGemm (bias and
// post-ops, see nn_dnnl.h) on oneDNN's matmul primitive.
//
// FusedMatMul inputs: A, B, [bias of shape [N]], [residual of the output's shape when
// post_ops has "Add"]; attributes transA/transB (0/1) apply to the last two dimensions.
//
// Fast paths: when B is a matrix (a Linear layer), A's leading dimensions are folded into M and
// the product is one 2-D matmul; constant B is reordered once into oneDNN's packed layout.
// Equal batch dimensions become one 3-D batched matmul. Other broadcasts loop over the batch
// with sgemm.
//
// Backend: the 2-D product with constant B may run on OpenBLAS or Kiln's packed AVX2 kernel
// instead of oneDNN, chosen per shape and ISA at Reshape (gemm_backend.h: oneDNN on AVX-512,
// the fastest of the three on AVX2). OpenBLAS reads the constant weights in place; the packed
// kernel's panels are made once per model (PackedConstantCache) and shared by every plan.
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gemm_backend.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"
#include "nn_dnnl.h"
#include "nn_dnnl_run_state.h"

namespace kiln::kernels::nn {
namespace {

using dnnl::memory;

enum class Flavor { kMatMul, kGemm, kFusedMatMul, kFusedGemm };

class MatMulKernel : public OpKernel {
 public:
  MatMulKernel(const ir::Node& node, Flavor flavor) : node_(node), flavor_(flavor) {}

  absl::Status Create(CreateContext& ctx) override {
    return CatchDnnl(node_, [&] { return CreateImpl(ctx); });
  }
  absl::Status Reshape(ReshapeContext& ctx) override {
    return CatchDnnl(node_, [&] { return ReshapeImpl(ctx); });
  }
  absl::Status Compute(ComputeContext& ctx) const override {
    return CatchDnnl(node_, [&] { return ComputeImpl(ctx); });
  }

 private:
  bool is_gemm() const { return flavor_ == Flavor::kGemm || flavor_ == Flavor::kFusedGemm; }

  // Once per node per model: checks the attributes, and packs constant 2-D weights into the
  // layout oneDNN's matmul picks for the rows the graph records (1 where it leaves the batch
  // open). Only brgemm (AVX-512) packs: its layout follows K, N and the ISA, not the rows, so
  // every plan's Reshape finds them here. The AVX2 backends' choice is timed per shape at
  // Reshape (gemm_backend.h), with their own packing kept in the model's cache.
  absl::Status CreateImpl(CreateContext& ctx) {
    KILN_ASSIGN_OR_RETURN(post_ops_, ReadPostOps(node_));
    dnnl::post_ops ops;
    KILN_RETURN_IF_ERROR(AppendPostOps(node_, post_ops_, ops).status());
    for (const char* name : {"transA", "transB"}) {
      const int64_t v = node_.GetInt(name, 0);
      if (v != 0 && v != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": ", name, " must be 0 or 1, got ", v));
      }
    }
    if (ctx.inputs.size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs inputs A and B"));
    }
    const InputInfo& a = ctx.inputs[0];
    const InputInfo& b = ctx.inputs[1];
    if (b.constant == nullptr || b.dtype != DType::kFloat32 || b.shape.rank() != 2 ||
        a.shape.rank() < 1) {
      return absl::OkStatus();  // nothing to pack, or no shape to choose the layout for
    }
    Shape a_shape = a.shape;
    for (int i = 0; i < a_shape.rank(); ++i) {
      if (a_shape.dim(i) < 0) a_shape.set_dim(i, 1);
    }
    const absl::Status packed = ReshapeForCreate(ctx, a_shape, &creating_,
                                                 [&](ReshapeContext& c) { return ReshapeImpl(c); });
    // A shape no plan will have (the graph's types disagree with B): nothing packed here;
    // Reshape reports it, or packs for the plan's shape.
    if (!packed.ok()) packed_b_.reset();
    return absl::OkStatus();
  }

  absl::Status ReshapeImpl(ReshapeContext& ctx) {
    const MatMulKernel* created = static_cast<const MatMulKernel*>(ctx.created);
    if (created != nullptr && created != this) {
      post_ops_ = created->post_ops_;  // read and checked by Create
    } else if (created == nullptr) {
      KILN_ASSIGN_OR_RETURN(post_ops_, ReadPostOps(node_));
    }
    // What Create packed, read before this object changes (`created` may be this object).
    std::shared_ptr<const dnnl::memory> created_b;
    memory::desc created_b_desc, created_user_b_desc;
    if (created != nullptr && created->packed_b_) {
      created_b = created->packed_b_;
      created_b_desc = created->b_desc_;
      created_user_b_desc = created->user_b_desc_;
    }
    const bool has_residual = std::any_of(post_ops_.begin(), post_ops_.end(), [](const PostOp& p) {
      return p.kind == ir::kResidualPostOp;
    });
    if (ctx.inputs.size() < 2 || !ctx.inputs[0].present() || !ctx.inputs[1].present()) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": needs inputs A and B"));
    }
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (ctx.inputs[i].present() && ctx.inputs[i].dtype != DType::kFloat32) {
        return absl::UnimplementedError(absl::StrCat(node_.Describe(), ": input ", i, " is ",
                                                     DTypeName(ctx.inputs[i].dtype),
                                                     "; only float is supported"));
      }
    }
    Shape a = ctx.inputs[0].shape, b = ctx.inputs[1].shape;
    trans_a_ = node_.GetInt("transA", 0) != 0;
    trans_b_ = node_.GetInt("transB", 0) != 0;
    alpha_ = is_gemm() ? node_.GetFloat("alpha", 1.0f) : 1.0f;
    beta_ = is_gemm() ? node_.GetFloat("beta", 1.0f) : 1.0f;
    if (is_gemm() && (a.rank() != 2 || b.rank() != 2)) {
      return absl::InvalidArgumentError(absl::StrCat(
          node_.Describe(), ": Gemm needs 2-D A and B; got ", a.ToString(), " and ", b.ToString()));
    }
    if (a.rank() == 0 || b.rank() == 0) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": MatMul of a scalar"));
    }
    // numpy: a vector A is [1, K] (M removed after); a vector B is [K, 1] (N removed after).
    const bool a_vector = a.rank() == 1, b_vector = b.rank() == 1;
    if (a_vector) a.insert(0, 1);
    if (b_vector) b.push_back(1);
    const int64_t m = trans_a_ ? a.dim(a.rank() - 1) : a.dim(a.rank() - 2);
    const int64_t k = trans_a_ ? a.dim(a.rank() - 2) : a.dim(a.rank() - 1);
    const int64_t kb = trans_b_ ? b.dim(b.rank() - 1) : b.dim(b.rank() - 2);
    const int64_t n = trans_b_ ? b.dim(b.rank() - 2) : b.dim(b.rank() - 1);
    if (k != kb) {
      return absl::InvalidArgumentError(
          absl::StrCat(node_.Describe(), ": inner dimensions differ: A ",
                       ctx.inputs[0].shape.ToString(), " and B ", ctx.inputs[1].shape.ToString()));
    }
    // Broadcast batch dimensions.
    const int batch_rank = std::max(a.rank(), b.rank()) - 2;
    std::vector<int64_t> a_batch(batch_rank, 1), b_batch(batch_rank, 1), out_batch(batch_rank, 1);
    for (int i = 0; i < a.rank() - 2; ++i) a_batch[batch_rank - (a.rank() - 2) + i] = a.dim(i);
    for (int i = 0; i < b.rank() - 2; ++i) b_batch[batch_rank - (b.rank() - 2) + i] = b.dim(i);
    for (int i = 0; i < batch_rank; ++i) {
      if (a_batch[i] != b_batch[i] && a_batch[i] != 1 && b_batch[i] != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            node_.Describe(), ": batch dimensions of A ", ctx.inputs[0].shape.ToString(), " and B ",
            ctx.inputs[1].shape.ToString(), " do not broadcast"));
      }
      out_batch[i] = a_batch[i] == 1 ? b_batch[i] : a_batch[i];  // 1 broadcasts, 0 stays 0
    }
    Shape out;
    for (int64_t d : out_batch) out.push_back(d);
    if (!a_vector) out.push_back(m);
    if (!b_vector) out.push_back(n);
    m_ = m;
    n_ = n;
    k_ = k;
    int64_t a_batch_count = 1, b_batch_count = 1, out_batch_count = 1;
    for (int i = 0; i < batch_rank; ++i) {
      a_batch_count *= a_batch[i];
      b_batch_count *= b_batch[i];
      out_batch_count *= out_batch[i];
    }
    work_macs_ = out_batch_count * m * n * k;

    // Bias ([N] or broadcastable C of Gemm) and residual.
    bias_index_ = -1;
    c_index_ = -1;
    residual_index_ = has_residual ? static_cast<int>(ctx.inputs.size()) - 1 : -1;
    if (ctx.inputs.size() > 2 && ctx.inputs[2].present() && residual_index_ != 2) {
      const Shape& c = ctx.inputs[2].shape;
      const bool row_vector =
          (c.rank() == 1 && c.dim(0) == n) || (c.rank() == 2 && c.dim(0) == 1 && c.dim(1) == n);
      if (row_vector && beta_ == 1.0f && alpha_ == 1.0f) {
        bias_index_ = 2;
      } else if (is_gemm()) {
        c_index_ = 2;  // general C: dst is pre-filled with beta * broadcast(C)
        c_shape_ = c;
        if (c.rank() > 2 ||
            (c.rank() >= 1 && c.dim(c.rank() - 1) != n && c.dim(c.rank() - 1) != 1) ||
            (c.rank() == 2 && c.dim(0) != m && c.dim(0) != 1)) {
          return absl::InvalidArgumentError(absl::StrCat(
              node_.Describe(), ": C ", c.ToString(), " does not broadcast to [", m, ", ", n, "]"));
        }
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(node_.Describe(), ": bias must be [", n, "]; got ", c.ToString()));
      }
    }
    // (Create's rows stand for any batch: the residual's graph shape may leave it open.)
    if (!creating_ && residual_index_ >= 0 && ctx.inputs[residual_index_].shape != out) {
      return absl::InvalidArgumentError(absl::StrCat(node_.Describe(), ": residual ",
                                                     ctx.inputs[residual_index_].shape.ToString(),
                                                     " must match output ", out.ToString()));
    }

    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = out;
    if (residual_index_ >= 0) ctx.output_in_place_of[0] = residual_index_;
    // An empty product (batch 0, M, N or K of 0) has no work for oneDNN, whose primitive
    // creation divides by these dimensions: Compute writes the result itself.
    empty_product_ = out_batch_count == 0 || m == 0 || n == 0 || k == 0;
    if (empty_product_) return absl::OkStatus();

    // Choose the execution path.
    auto& engine = CpuEngine();
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha_ != 1.0f) attr.set_output_scales(0, {alpha_});
    dnnl::post_ops ops;
    // Pre-filled dst (general C) is added by a leading sum post-op.
    if (c_index_ >= 0) ops.append_sum(1.0f);
    KILN_ASSIGN_OR_RETURN(epilogue_, AppendPostOps(node_, post_ops_, ops));
    attr.set_post_ops(ops);

    use_loop_ = false;
    memory::dims a_dims, b_dims, c_dims, a_strides, b_strides;
    if (b_batch_count == 1) {
      // One 2-D product: A's batch folded into M (only possible when A is not transposed).
      if (!trans_a_ || a_batch_count == 1) {
        rows_ = a_batch_count * m;
        a_dims = {rows_, k};
        a_strides = trans_a_ ? memory::dims{1, m} : memory::dims{k, 1};
        b_dims = {k, n};
        b_strides = trans_b_ ? memory::dims{1, k} : memory::dims{n, 1};
        c_dims = {rows_, n};
        batched_ = false;
      } else {
        use_loop_ = true;
      }
    } else if (a_batch == b_batch) {
      a_dims = {a_batch_count, m, k};
      a_strides = trans_a_ ? memory::dims{m * k, 1, m} : memory::dims{m * k, k, 1};
      b_dims = {a_batch_count, k, n};
      b_strides = trans_b_ ? memory::dims{k * n, 1, k} : memory::dims{k * n, n, 1};
      c_dims = {a_batch_count, m, n};
      batched_ = true;
    } else {
      use_loop_ = true;
    }
    if (use_loop_ && (c_index_ >= 0 || !post_ops_.empty() || bias_index_ >= 0)) {
      return absl::UnimplementedError(
          absl::StrCat(node_.Describe(), ": fused post-ops with broadcast batch dimensions"));
    }
    a_batch_ = a_batch;
    b_batch_ = b_batch;
    out_batch_ = out_batch;
    size_t scratch_bytes = 0;
    if (!use_loop_) {
      user_a_desc_ = memory::desc(a_dims, memory::data_type::f32, a_strides);
      user_b_desc_ = memory::desc(b_dims, memory::data_type::f32, b_strides);
      c_desc_ = memory::desc(c_dims, memory::data_type::f32,
                             batched_ ? memory::format_tag::abc : memory::format_tag::ab);
      const bool b_constant = ctx.inputs[1].constant != nullptr;
      const memory::desc b_any =
          b_constant ? memory::desc(b_dims, memory::data_type::f32, memory::format_tag::any)
                     : user_b_desc_;
      bias_desc_ = memory::desc();
      if (bias_index_ >= 0) {
        bias_desc_ = batched_
                         ? memory::desc({1, 1, n}, memory::data_type::f32, memory::format_tag::abc)
                         : memory::desc({1, n}, memory::data_type::f32, memory::format_tag::ab);
      }
      const memory::desc& bias_desc = bias_desc_;
      dnnl::matmul::desc d(user_a_desc_, b_any, bias_desc, c_desc_);
      dnnl::matmul::primitive_desc pd(d, attr, engine);
      // Only brgemm (AVX-512) needs its own weight layout. Other implementations (gemm:jit on
      // AVX2) read the weights as stored, transposed or not: packing them would only copy them
      // for every model, and OpenBLAS, the other candidate there, reads them in place.
      const bool brgemm = absl::StartsWith(pd.impl_info_str(), "brg");
      const bool backend_choice = b_constant && !batched_ && residual_index_ < 0;
      if (backend_choice && !brgemm && b_any != user_b_desc_) {
        pd = dnnl::matmul::primitive_desc(
            dnnl::matmul::desc(user_a_desc_, user_b_desc_, bias_desc, c_desc_), attr, engine);
      }
      scratch_desc_ = pd.scratchpad_desc();
      scratch_bytes = Align64(scratch_desc_.get_size());
      b_desc_ = pd.weights_desc();
      packed_b_.reset();
      if (b_constant && b_desc_ != user_b_desc_ && created_b && created_b_desc == b_desc_ &&
          created_user_b_desc == user_b_desc_) {
        packed_b_ = std::move(created_b);
      } else if (b_constant && b_desc_ != user_b_desc_) {
        // Another layout than Create's (or no Create): packed once per model and layout.
        KILN_ASSIGN_OR_RETURN(
            packed_b_, PackConstant(ctx.packed_constants, ctx.node ? *ctx.node : node_,
                                    user_b_desc_, ctx.inputs[1].constant->raw_data(), b_desc_));
      } else {
        b_desc_ = user_b_desc_;
      }
      if (creating_) return absl::OkStatus();  // Create keeps only the packed weights
      primitive_ = dnnl::matmul(pd);
      backend_ = GemmBackend::kOneDnn;
      packed_gemm_b_.reset();
      // OpenBLAS computes bias, Gemm's C and activations as the unfused ops would; a fused
      // residual may share the output's memory (in place), which sgemm would overwrite first.
      if (backend_choice) KILN_RETURN_IF_ERROR(ChooseBackend(ctx, m, scratch_bytes, brgemm));
    }
    ctx.scratch_bytes = scratch_bytes;
    return absl::OkStatus();
  }

  absl::Status ChooseBackend(ReshapeContext& ctx, int64_t m, size_t scratch_bytes, bool brgemm) {
    gemm_.rows = rows_;
    gemm_.n = n_;
    gemm_.k = k_;
    gemm_.trans_a = trans_a_;
    gemm_.trans_b = trans_b_;
    gemm_.lda = trans_a_ ? m : k_;
    gemm_.ldb = trans_b_ ? k_ : n_;
    gemm_.alpha = alpha_;
    gemm_.accumulate = c_index_ >= 0;
    const void* b_data = ctx.inputs[1].constant->raw_data();
    // What Compute would run on oneDNN, for the timing: zeros for the bias (its values do not
    // change the speed); Gemm's C and the epilogue cost both backends the same and are left out.
    std::vector<float> bias(static_cast<size_t>(bias_index_ >= 0 ? n_ : 0), 0.0f);
    std::vector<char> scratch(scratch_bytes + 64);
    void* scratch_aligned =
        scratch.data() + (64 - reinterpret_cast<uintptr_t>(scratch.data()) % 64);
    const std::unique_ptr<RunState> state = MakeRunState();
    auto run_onednn = [&](const float* a, float* c) {
      ExecuteOneDnn(*state, a, b_data, bias_index_ >= 0 ? bias.data() : nullptr, c,
                    scratch_aligned);
    };
    KILN_ASSIGN_OR_RETURN(GemmChoice choice,
                          ChooseGemmBackend(ctx.packed_constants, ctx.node ? ctx.node : &node_,
                                            gemm_, static_cast<const float*>(b_data),
                                            ctx.intra_op_threads, brgemm, run_onednn));
    backend_ = choice.backend;
    packed_gemm_b_ = std::move(choice.packed);
    return absl::OkStatus();
  }

  // The product on OpenBLAS or the packed kernel, then what oneDNN would have fused, in the unfused
  // ops' order: bias (or Gemm's beta * C, written first and accumulated into), then the
  // activations.
  absl::Status OpenBlasCompute(ComputeContext& ctx) const {
    Tensor& y = ctx.outputs[0];
    float* yv = y.data<float>();
    if (c_index_ >= 0) FillC(ctx.inputs[c_index_], yv);
    if (backend_ == GemmBackend::kPacked) {
      PackedGemm(gemm_, ctx.inputs[0].data<float>(), *packed_gemm_b_, yv);
    } else {
      OpenBlasGemm(gemm_, ctx.inputs[0].data<float>(), ctx.inputs[1].data<float>(), yv);
    }
    if (bias_index_ >= 0) {
      const float* bias = ctx.inputs[bias_index_].data<float>();
      for (int64_t r = 0; r < rows_; ++r) {
        float* row = yv + r * n_;
        for (int64_t j = 0; j < n_; ++j) row[j] += bias[j];
      }
    }
    ApplyEpilogue(post_ops_, yv, y.num_elements(), ctx);
    return absl::OkStatus();
  }

  // K == 0: the product is all zeros, so the output is what the epilogue makes of zeros, in
  // oneDNN's order: bias, Gemm's beta * C (a sum post-op), then the fused post-ops.
  absl::Status ComputeEmptyProduct(ComputeContext& ctx) const {
    Tensor& y = ctx.outputs[0];
    const int64_t total = y.num_elements();
    if (total == 0) return absl::OkStatus();
    float* yv = y.data<float>();
    std::vector<float> residual;
    if (residual_index_ >= 0) {
      const Tensor& r = ctx.inputs[residual_index_];
      residual.assign(r.data<float>(), r.data<float>() + total);
    }
    std::vector<float> c;
    if (c_index_ >= 0) {
      c.resize(static_cast<size_t>(m_ * n_));
      FillC(ctx.inputs[c_index_], c.data());
    }
    for (int64_t i = 0; i < total; ++i) {
      float v = 0.0f;
      if (bias_index_ >= 0) v += ctx.inputs[bias_index_].data<float>()[i % n_];
      if (c_index_ >= 0) v += c[static_cast<size_t>(i % (m_ * n_))];
      yv[i] = v;
    }
    ApplyPostOpsInOrder(post_ops_, residual.data(), yv, total);
    return absl::OkStatus();
  }

  using RunState = SrcWeightsDstRunState;
  std::unique_ptr<RunState> MakeRunState() const {
    return RunState::Make(user_a_desc_, b_desc_, packed_b_.get(),
                          bias_index_ >= 0 ? bias_desc_ : memory::desc(), c_desc_, scratch_desc_);
  }

  // One run of the oneDNN primitive on raw pointers (`bias` null when the node has none),
  // through the run state's memory objects, re-pointed (no allocation).
  void ExecuteOneDnn(const RunState& s, const void* a, const void* b, const void* bias, void* c,
                     void* scratch) const {
    s.Execute(primitive_, ThreadStream(), a, b, bias, c, scratch);
  }

 public:
  std::unique_ptr<KernelRunState> NewRunState() const override {
    if (empty_product_ || use_loop_ || backend_ != GemmBackend::kOneDnn) return nullptr;
    return NewDnnlRunState([&] { return MakeRunState(); });
  }

 private:
  // Fills dst with beta * broadcast(C) for Gemm's general C.
  void FillC(const Tensor& c, float* dst) const {
    const float* cv = c.data<float>();
    const int64_t rows = c_shape_.rank() == 2 ? c_shape_.dim(0) : 1;
    const int64_t cols = c_shape_.rank() >= 1 ? c_shape_.dim(c_shape_.rank() - 1) : 1;
    for (int64_t i = 0; i < m_; ++i) {
      for (int64_t j = 0; j < n_; ++j) {
        dst[i * n_ + j] = beta_ * cv[(rows == 1 ? 0 : i) * cols + (cols == 1 ? 0 : j)];
      }
    }
  }

  absl::Status ComputeImpl(ComputeContext& ctx) const {
    // Waking a sleeping OpenMP worker costs microseconds: a product this small (DLRM's
    // batch-1 layers are 72K-131K multiply-adds) finishes sooner on the calling thread alone.
    constexpr int64_t kSerialMacs = int64_t{1} << 18;
    ScopedDnnlThreads threads(work_macs_ < kSerialMacs ? 1 : ctx.intra_op_threads);
    const Tensor& a = ctx.inputs[0];
    const Tensor& b = ctx.inputs[1];
    Tensor& y = ctx.outputs[0];
    if (y.num_elements() == 0) return absl::OkStatus();
    if (empty_product_) return ComputeEmptyProduct(ctx);
    if (use_loop_) return LoopCompute(a, b, y);
    if (backend_ != GemmBackend::kOneDnn) return OpenBlasCompute(ctx);
    if (c_index_ >= 0) FillC(ctx.inputs[c_index_], y.data<float>());
    if (residual_index_ >= 0) {
      const Tensor& r = ctx.inputs[residual_index_];
      if (r.raw_data() != y.raw_data()) std::memcpy(y.raw_data(), r.raw_data(), y.byte_size());
    }
    std::unique_ptr<RunState> owned;
    const RunState& s = RunStateFor(ctx, owned, [&] { return MakeRunState(); });
    ExecuteOneDnn(s, a.raw_data(), b.raw_data(),
                  bias_index_ >= 0 ? ctx.inputs[bias_index_].raw_data() : nullptr, y.raw_data(),
                  ctx.scratch);
    ApplyEpilogue(epilogue_, y.data<float>(), y.num_elements(), ctx);
    return absl::OkStatus();
  }

  // General batch broadcasting: one sgemm per output matrix.
  absl::Status LoopCompute(const Tensor& a, const Tensor& b, Tensor& y) const {
    const int rank = static_cast<int>(out_batch_.size());
    int64_t total = 1;
    for (int64_t d : out_batch_) total *= d;
    std::vector<int64_t> index(rank, 0);
    const float* av = a.data<float>();
    const float* bv = b.data<float>();
    float* yv = y.data<float>();
    for (int64_t t = 0; t < total; ++t) {
      int64_t a_off = 0, b_off = 0;
      for (int i = 0; i < rank; ++i) {
        a_off = a_off * a_batch_[i] + (a_batch_[i] == 1 ? 0 : index[i]);
        b_off = b_off * b_batch_[i] + (b_batch_[i] == 1 ? 0 : index[i]);
      }
      const dnnl_status_t st = dnnl_sgemm(
          trans_a_ ? 'T' : 'N', trans_b_ ? 'T' : 'N', m_, n_, k_, alpha_, av + a_off * m_ * k_,
          trans_a_ ? m_ : k_, bv + b_off * k_ * n_, trans_b_ ? k_ : n_, 0.0f, yv + t * m_ * n_, n_);
      if (st != dnnl_success) {
        return absl::InternalError(absl::StrCat(node_.Describe(), ": sgemm failed (", st, ")"));
      }
      for (int i = rank - 1; i >= 0; --i) {
        if (++index[i] < out_batch_[i]) break;
        index[i] = 0;
      }
    }
    return absl::OkStatus();
  }

  ir::Node node_;
  Flavor flavor_;
  bool creating_ = false;  // ReshapeImpl runs for Create: pack the weights, make no primitive
  std::vector<PostOp> post_ops_;
  std::vector<PostOp> epilogue_;  // post-ops run after the primitive (nn_dnnl.h)
  bool trans_a_ = false, trans_b_ = false, batched_ = false, use_loop_ = false;
  bool empty_product_ = false;
  float alpha_ = 1, beta_ = 1;
  int64_t m_ = 0, n_ = 0, k_ = 0, rows_ = 0;
  int64_t work_macs_ = 0;
  int bias_index_ = -1, c_index_ = -1, residual_index_ = -1;
  Shape c_shape_;
  std::vector<int64_t> a_batch_, b_batch_, out_batch_;
  memory::desc user_a_desc_, user_b_desc_, b_desc_, c_desc_, scratch_desc_;
  memory::desc bias_desc_;
  std::shared_ptr<const dnnl::memory> packed_b_;  // shared by the model's plans
  GemmBackend backend_ = GemmBackend::kOneDnn;
  GemmShape gemm_;  // the product as OpenBLAS or the packed kernel runs it
  std::shared_ptr<const PackedGemmB> packed_gemm_b_;  // kPacked: shared by the model's plans
  dnnl::matmul primitive_;
};

template <Flavor F>
absl::StatusOr<std::unique_ptr<OpKernel>> MakeMatMul(const ir::Node& node) {
  return std::unique_ptr<OpKernel>(new MatMulKernel(node, F));
}

KILN_REGISTER_KERNEL("", "MatMul", MakeMatMul<Flavor::kMatMul>);
KILN_REGISTER_KERNEL("", "Gemm", MakeMatMul<Flavor::kGemm>);
KILN_REGISTER_KERNEL(ir::kKilnDomain, ir::kFusedMatMulOp, MakeMatMul<Flavor::kFusedMatMul>);
KILN_REGISTER_KERNEL(ir::kKilnDomain, ir::kFusedGemmOp, MakeMatMul<Flavor::kFusedGemm>);

}  // namespace

KILN_KERNEL_FILE(nn_matmul);

}  // namespace kiln::kernels::nn
