// Einsum(inputs...), equation: numpy's einsum notation with "..." and implicit outputs.
//
// Two inputs whose labels split cleanly into batch (both inputs and output), M (first input
// and output), N (second input and output) and K (both inputs, summed) run as a batched GEMM:
// operands already laid out as [batch, M, K] / [batch, K, M] (and [batch, K, N] /
// [batch, N, K]) are used in place, others are packed once with the strided-copy engine,
// float32 goes through oneDNN's sgemm and other dtypes through a cache-friendly loop. Every
// other equation (one input: transposes, diagonals, reductions; three or more inputs; labels
// summed within one operand) runs on a general loop over the label space.
#include <algorithm>
#include <array>
#include <map>

#include "kernels/cpu/tensor_common.h"
#include "oneapi/dnnl/dnnl.h"

namespace kiln::kernels::tensor_ops {
namespace {

struct Term {
  std::vector<int> labels;  // one per dim of the operand
};

class EinsumKernel : public TensorKernel {
 public:
  explicit EinsumKernel(const ir::Node& node)
      : TensorKernel(node), equation_(node.GetString("equation", "")) {
    equation_.erase(std::remove(equation_.begin(), equation_.end(), ' '), equation_.end());
    if (equation_.empty()) SetAttrError(Error("equation attribute is required"));
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty()) return Error("expects at least one input");
    const DType dtype = ctx.inputs[0].dtype;
    if (dtype == DType::kString || dtype == DType::kBool) {
      return Error("unsupported dtype ", DTypeName(dtype));
    }
    for (const InputInfo& in : ctx.inputs) {
      if (in.dtype != dtype) return Error("inputs must share a dtype");
    }
    std::vector<Shape> shapes;
    for (const InputInfo& in : ctx.inputs) shapes.push_back(in.shape);
    KILN_RETURN_IF_ERROR(Parse(shapes));
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = dtype;
    Shape out;
    for (int l : output_.labels) out.push_back(label_size_[l]);
    ctx.output_shapes[0] = out;
    PlanGemm(shapes);
    if (gemm_) {
      const size_t es = DTypeSize(dtype);
      auto round = [](size_t b) { return (b + 63) / 64 * 64; };
      a_scratch_ = pack_a_ ? round(batch_ * m_ * k_ * es) : 0;
      b_scratch_ = pack_b_ ? round(batch_ * k_ * n_ * es) : 0;
      c_scratch_ = c_direct_ ? 0 : round(batch_ * m_ * n_ * es);
      ctx.scratch_bytes = a_scratch_ + b_scratch_ + c_scratch_;
    }
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    Tensor& out = ctx.outputs[0];
    absl::Status status;
    VisitDType(out.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, std::string> && !std::is_same_v<T, bool>) {
        if (gemm_) {
          status = RunGemm<T>(ctx);
        } else {
          RunGeneral<T>(ctx);
        }
      }
    });
    return status;
  }

 private:
  // Label ids: ellipsis dim e -> e (right-aligned over max_ellipsis_), letter c -> 64 + c.
  absl::Status Parse(const std::vector<Shape>& shapes) {
    std::string lhs = equation_, rhs;
    const size_t arrow = equation_.find("->");
    const bool explicit_out = arrow != std::string::npos;
    if (explicit_out) {
      lhs = equation_.substr(0, arrow);
      rhs = equation_.substr(arrow + 2);
    }
    std::vector<std::string> terms;
    size_t start = 0;
    while (true) {
      const size_t comma = lhs.find(',', start);
      terms.push_back(lhs.substr(start, comma == std::string::npos ? comma : comma - start));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    if (terms.size() != shapes.size()) {
      return Error("equation '", equation_, "' has ", terms.size(), " operands, node has ",
                   shapes.size(), " inputs");
    }
    // Letters and ellipsis rank per term.
    std::vector<std::vector<int>> letters(terms.size());
    std::vector<int> ellipsis_pos(terms.size(), -1);
    max_ellipsis_ = 0;
    for (size_t i = 0; i < terms.size(); ++i) {
      const std::string& t = terms[i];
      for (size_t p = 0; p < t.size(); ++p) {
        if (t.compare(p, 3, "...") == 0) {
          if (ellipsis_pos[i] >= 0) return Error("operand ", i, " has two ellipses");
          ellipsis_pos[i] = static_cast<int>(letters[i].size());
          p += 2;
        } else if (std::isalpha(static_cast<unsigned char>(t[p]))) {
          letters[i].push_back(t[p]);
        } else {
          return Error("bad character '", std::string(1, t[p]), "' in equation '", equation_, "'");
        }
      }
      const int ell = shapes[i].rank() - static_cast<int>(letters[i].size());
      if (ell < 0 || (ell > 0 && ellipsis_pos[i] < 0)) {
        return Error("operand ", i, " '", t, "' does not match its shape ", shapes[i].ToString());
      }
      max_ellipsis_ = std::max(max_ellipsis_, ell);
    }
    label_size_.assign(64 + 128, -1);
    inputs_.assign(terms.size(), {});
    std::map<int, int> letter_count;
    for (size_t i = 0; i < terms.size(); ++i) {
      const int ell = shapes[i].rank() - static_cast<int>(letters[i].size());
      std::vector<int>& labels = inputs_[i].labels;
      for (int j = 0; j < static_cast<int>(letters[i].size()); ++j) {
        if (j == ellipsis_pos[i]) {
          for (int e = 0; e < ell; ++e) labels.push_back(max_ellipsis_ - ell + e);
        }
        labels.push_back(64 + letters[i][j]);
        ++letter_count[letters[i][j]];
      }
      if (ellipsis_pos[i] == static_cast<int>(letters[i].size())) {
        for (int e = 0; e < ell; ++e) labels.push_back(max_ellipsis_ - ell + e);
      }
      for (int d = 0; d < shapes[i].rank(); ++d) {
        const int l = labels[d];
        const int64_t size = shapes[i].dim(d);
        int64_t& known = label_size_[l];
        if (known < 0 || (l < 64 && known == 1)) {
          known = size;
        } else if (known != size && !(l < 64 && size == 1)) {
          return Error("label '", l < 64 ? std::string("...") : std::string(1, char(l - 64)),
                       "' has sizes ", known, " and ", size);
        }
      }
    }
    output_.labels.clear();
    if (explicit_out) {
      bool has_ellipsis = false;
      for (size_t p = 0; p < rhs.size(); ++p) {
        if (rhs.compare(p, 3, "...") == 0) {
          for (int e = 0; e < max_ellipsis_; ++e) output_.labels.push_back(e);
          has_ellipsis = true;
          p += 2;
        } else if (std::isalpha(static_cast<unsigned char>(rhs[p])) &&
                   letter_count.count(rhs[p]) > 0) {
          const int l = 64 + rhs[p];
          if (std::count(output_.labels.begin(), output_.labels.end(), l) > 0) {
            return Error("output label '", std::string(1, rhs[p]), "' repeated");
          }
          output_.labels.push_back(l);
        } else {
          return Error("output label '", std::string(1, rhs[p]), "' is not in any operand");
        }
      }
      (void)has_ellipsis;  // without "...", broadcast dims are summed
    } else {
      for (int e = 0; e < max_ellipsis_; ++e) output_.labels.push_back(e);
      for (const auto& [c, count] : letter_count) {
        if (count == 1) output_.labels.push_back(64 + c);
      }
    }
    for (int l = 0; l < static_cast<int>(label_size_.size()); ++l) {
      if (label_size_[l] < 0) label_size_[l] = 0;
    }
    return absl::OkStatus();
  }

  bool InTerm(const Term& t, int l) const {
    return std::find(t.labels.begin(), t.labels.end(), l) != t.labels.end();
  }

  void PlanGemm(const std::vector<Shape>& shapes) {
    gemm_ = false;
    if (inputs_.size() != 2) return;
    const Term& a = inputs_[0];
    const Term& b = inputs_[1];
    for (const Term* t : {&a, &b}) {
      std::vector<int> sorted = t->labels;
      std::sort(sorted.begin(), sorted.end());
      if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) return;  // diagonal
    }
    batch_labels_.clear();
    m_labels_.clear();
    n_labels_.clear();
    k_labels_.clear();
    for (int l : output_.labels) {
      const bool ia = InTerm(a, l), ib = InTerm(b, l);
      (ia && ib ? batch_labels_ : ia ? m_labels_ : n_labels_).push_back(l);
    }
    for (int l : a.labels) {
      if (InTerm(output_, l)) continue;
      if (!InTerm(b, l)) return;  // summed within A only
      k_labels_.push_back(l);
    }
    for (int l : b.labels) {
      if (!InTerm(output_, l) && !InTerm(a, l)) return;  // summed within B only
    }
    // Broadcast batch dims (size 1 in one operand) need packing with stride 0.
    auto prod = [&](const std::vector<int>& ls) {
      int64_t p = 1;
      for (int l : ls) p *= label_size_[l];
      return p;
    };
    batch_ = prod(batch_labels_);
    m_ = prod(m_labels_);
    n_ = prod(n_labels_);
    k_ = prod(k_labels_);
    auto concat = [](std::initializer_list<const std::vector<int>*> parts) {
      std::vector<int> r;
      for (const auto* p : parts) r.insert(r.end(), p->begin(), p->end());
      return r;
    };
    auto no_broadcast = [&](const Term& t, const Shape& s) {
      for (int d = 0; d < s.rank(); ++d) {
        if (s.dim(d) != label_size_[t.labels[d]]) return false;
      }
      return true;
    };
    const bool a_ok = no_broadcast(a, shapes[0]), b_ok = no_broadcast(b, shapes[1]);
    trans_a_ = trans_b_ = false;
    pack_a_ = pack_b_ = true;
    if (a_ok && a.labels == concat({&batch_labels_, &m_labels_, &k_labels_})) {
      pack_a_ = false;
    } else if (a_ok && a.labels == concat({&batch_labels_, &k_labels_, &m_labels_})) {
      pack_a_ = false;
      trans_a_ = true;
    }
    if (b_ok && b.labels == concat({&batch_labels_, &k_labels_, &n_labels_})) {
      pack_b_ = false;
    } else if (b_ok && b.labels == concat({&batch_labels_, &n_labels_, &k_labels_})) {
      pack_b_ = false;
      trans_b_ = true;
    }
    c_direct_ = output_.labels == concat({&batch_labels_, &m_labels_, &n_labels_});
    gemm_ = true;
  }

  // Packs operand `t` (shape `s`) into contiguous [order...] with stride 0 for broadcast dims.
  void Pack(const Tensor& in, const Term& t, const std::vector<int>& order, void* dst,
            const ComputeContext& ctx) const {
    const Dims strides = RowMajorStrides(in.shape().dims());
    Dims shape, src_strides;
    for (int l : order) {
      shape.push_back(label_size_[l]);
      int64_t st = 0;
      for (int d = 0; d < in.rank(); ++d) {
        if (t.labels[d] == l && in.dim(d) != 1) st = strides[d];
      }
      src_strides.push_back(st);
    }
    StridedCopy(in.dtype(), in.raw_data(), 0, shape, src_strides, dst, &ctx);
  }

  template <typename T>
  absl::Status RunGemm(ComputeContext& ctx) const {
    const Tensor& a_in = ctx.inputs[0];
    const Tensor& b_in = ctx.inputs[1];
    Tensor& out = ctx.outputs[0];
    std::shared_ptr<Buffer> own;
    char* scratch = static_cast<char*>(ctx.scratch);
    if (scratch == nullptr && a_scratch_ + b_scratch_ + c_scratch_ > 0) {
      own = Buffer::Allocate(a_scratch_ + b_scratch_ + c_scratch_);
      scratch = static_cast<char*>(own->data());
    }
    const T* a = a_in.data<T>();
    const T* b = b_in.data<T>();
    if (pack_a_) {
      std::vector<int> order = batch_labels_;
      order.insert(order.end(), m_labels_.begin(), m_labels_.end());
      order.insert(order.end(), k_labels_.begin(), k_labels_.end());
      Pack(a_in, inputs_[0], order, scratch, ctx);
      a = reinterpret_cast<const T*>(scratch);
    }
    if (pack_b_) {
      std::vector<int> order = batch_labels_;
      order.insert(order.end(), k_labels_.begin(), k_labels_.end());
      order.insert(order.end(), n_labels_.begin(), n_labels_.end());
      Pack(b_in, inputs_[1], order, scratch + a_scratch_, ctx);
      b = reinterpret_cast<const T*>(scratch + a_scratch_);
    }
    T* c = c_direct_ ? out.data<T>() : reinterpret_cast<T*>(scratch + a_scratch_ + b_scratch_);
    const bool ta = pack_a_ ? false : trans_a_, tb = pack_b_ ? false : trans_b_;
    const int64_t m = m_, n = n_, k = k_;
    if (m * n > 0) {
      if constexpr (std::is_same_v<T, float>) {
        for (int64_t i = 0; i < batch_; ++i) {
          const dnnl_status_t st = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, 1.0f,
                                              a + i * m * k, ta ? m : k, b + i * k * n,
                                              tb ? k : n, 0.0f, c + i * m * n, n);
          if (st != dnnl_success) return Error("oneDNN sgemm failed with status ", st);
        }
      } else {
        using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
        ctx.ParallelFor(batch_ * m, std::max<int64_t>(1, 4096 / std::max<int64_t>(n * k, 1)),
                        [&](int64_t begin, int64_t end) {
                          std::vector<Acc> row(n);
                          for (int64_t u = begin; u < end; ++u) {
                            const int64_t bi = u / m, i = u % m;
                            const T* ab = a + bi * m * k;
                            const T* bb = b + bi * k * n;
                            std::fill(row.begin(), row.end(), Acc(0));
                            for (int64_t p = 0; p < k; ++p) {
                              const Acc av = static_cast<Acc>(AsDouble(ta ? ab[p * m + i] : ab[i * k + p]));
                              if (tb) {
                                for (int64_t j = 0; j < n; ++j) row[j] += av * static_cast<Acc>(AsDouble(bb[j * k + p]));
                              } else {
                                for (int64_t j = 0; j < n; ++j) row[j] += av * static_cast<Acc>(AsDouble(bb[p * n + j]));
                              }
                            }
                            T* cr = c + u * n;
                            for (int64_t j = 0; j < n; ++j) cr[j] = FromDouble<T>(static_cast<double>(row[j]));
                          }
                        });
      }
    }
    if (!c_direct_) {
      // C is [batch, M, N] labels; the output wants another order.
      std::vector<int> c_labels = batch_labels_;
      c_labels.insert(c_labels.end(), m_labels_.begin(), m_labels_.end());
      c_labels.insert(c_labels.end(), n_labels_.begin(), n_labels_.end());
      std::vector<int64_t> c_dims;
      for (int l : c_labels) c_dims.push_back(label_size_[l]);
      const Dims c_strides = RowMajorStrides(c_dims);
      Dims shape, strides;
      for (int l : output_.labels) {
        const int pos = static_cast<int>(std::find(c_labels.begin(), c_labels.end(), l) - c_labels.begin());
        shape.push_back(label_size_[l]);
        strides.push_back(c_strides[pos]);
      }
      StridedCopy(out.dtype(), c, 0, shape, strides, out.raw_data(), &ctx);
    }
    return absl::OkStatus();
  }

  // out[o] = sum over the summed labels of the product of the operands.
  template <typename T>
  void RunGeneral(ComputeContext& ctx) const {
    using Acc = std::conditional_t<std::is_integral_v<T>, int64_t, double>;
    Tensor& out = ctx.outputs[0];
    std::vector<int> summed;
    for (const Term& t : inputs_) {
      for (int l : t.labels) {
        if (!InTerm(output_, l) && std::find(summed.begin(), summed.end(), l) == summed.end()) {
          summed.push_back(l);
        }
      }
    }
    const size_t n_in = inputs_.size();
    // Per operand, the stride of each output label and each summed label (diagonals add up).
    std::vector<std::vector<int64_t>> out_strides(n_in), sum_strides(n_in);
    for (size_t i = 0; i < n_in; ++i) {
      const Tensor& in = ctx.inputs[i];
      const Dims strides = RowMajorStrides(in.shape().dims());
      auto stride_of = [&](int l) {
        int64_t s = 0;
        for (int d = 0; d < in.rank(); ++d) {
          if (inputs_[i].labels[d] == l && in.dim(d) != 1) s += strides[d];
          // Size-1 broadcast dims contribute 0; a genuine size-1 label has index 0 anyway.
        }
        return s;
      };
      for (int l : output_.labels) out_strides[i].push_back(stride_of(l));
      for (int l : summed) sum_strides[i].push_back(stride_of(l));
    }
    int64_t sum_total = 1;
    for (int l : summed) sum_total *= label_size_[l];
    const int n_out = static_cast<int>(output_.labels.size());
    const int n_sum = static_cast<int>(summed.size());
    T* dst = out.data<T>();
    ctx.ParallelFor(out.num_elements(), std::max<int64_t>(1, 4096 / std::max<int64_t>(sum_total, 1)),
                    [&](int64_t begin, int64_t end) {
      std::vector<int64_t> base(n_in), off(n_in), sc(n_sum);
      for (int64_t o = begin; o < end; ++o) {
        std::fill(base.begin(), base.end(), 0);
        int64_t rem = o;
        for (int d = n_out - 1; d >= 0; --d) {
          const int64_t size = label_size_[output_.labels[d]];
          const int64_t c = rem % size;
          rem /= size;
          for (size_t i = 0; i < n_in; ++i) base[i] += c * out_strides[i][d];
        }
        Acc acc = 0;
        std::fill(sc.begin(), sc.end(), 0);
        off = base;
        for (int64_t s = 0; s < sum_total; ++s) {
          Acc p = 1;
          for (size_t i = 0; i < n_in; ++i) {
            p *= static_cast<Acc>(AsDouble(ctx.inputs[i].data<T>()[off[i]]));
          }
          acc += p;
          for (int d = n_sum - 1; d >= 0; --d) {
            for (size_t i = 0; i < n_in; ++i) off[i] += sum_strides[i][d];
            if (++sc[d] < label_size_[summed[d]]) break;
            for (size_t i = 0; i < n_in; ++i) off[i] -= sc[d] * sum_strides[i][d];
            sc[d] = 0;
          }
        }
        dst[o] = FromDouble<T>(static_cast<double>(acc));
      }
    });
  }

  std::string equation_;
  int max_ellipsis_ = 0;
  std::vector<int64_t> label_size_;
  std::vector<Term> inputs_;
  Term output_;
  // Batched-GEMM plan.
  bool gemm_ = false;
  std::vector<int> batch_labels_, m_labels_, n_labels_, k_labels_;
  int64_t batch_ = 1, m_ = 1, n_ = 1, k_ = 1;
  bool pack_a_ = true, pack_b_ = true, trans_a_ = false, trans_b_ = false, c_direct_ = false;
  size_t a_scratch_ = 0, b_scratch_ = 0, c_scratch_ = 0;
};

KILN_REGISTER_KERNEL_CLASS("", "Einsum", EinsumKernel);

}  // namespace

KILN_KERNEL_FILE(tensor_einsum);

}  // namespace kiln::kernels::tensor_ops
