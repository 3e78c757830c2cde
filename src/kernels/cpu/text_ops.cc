// TfIdfVectorizer over integer token ids (pool_int64s); string pools are not supported
// (Kiln keeps text processing in the input pipeline).
//
// For every row, n-grams of length min_gram_length..max_gram_length are gathered at every
// start position with the items skip + 1 apart, for skip = 0..max_skip_count; unigrams are
// counted once (at skip 0), as ONNX Runtime and the ONNX reference do. Each n-gram found in
// the pool adds one to its output slot (ngram_indexes); mode TF reports the counts, IDF the
// weight of every n-gram present, TFIDF counts times weights.
#include <algorithm>
#include <map>
#include <vector>

#include "kernels/cpu/math_common.h"
#include "kernels/cpu/tensor_common.h"

namespace kiln::kernels::text {
namespace {

using math::MathKernel;

class TfIdfVectorizerKernel : public MathKernel {
 public:
  explicit TfIdfVectorizerKernel(const ir::Node& node)
      : MathKernel(node),
        min_gram_(node.GetInt("min_gram_length", 1)),
        max_gram_(node.GetInt("max_gram_length", 1)),
        max_skip_(node.GetInt("max_skip_count", 0)),
        weights_(node.GetFloats("weights")) {
    const std::string mode = node.GetString("mode", "TF");
    mode_ = mode == "TF" ? 0 : mode == "IDF" ? 1 : mode == "TFIDF" ? 2 : -1;
    if (mode_ < 0) SetAttrError(Error("mode '", mode, "' is not TF, IDF or TFIDF"));
    if (!node.GetStrings("pool_strings").empty()) {
      SetAttrError(Error("pool_strings is not supported (integer token pools only)"));
    }
    if (min_gram_ < 1 || max_gram_ < min_gram_ || max_skip_ < 0) {
      SetAttrError(Error("need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0"));
    }
    const std::vector<int64_t> pool = node.GetInts("pool_int64s", {});
    const std::vector<int64_t> counts = node.GetInts("ngram_counts", {});
    const std::vector<int64_t> indexes = node.GetInts("ngram_indexes", {});
    // ngram_counts[k] is where the (k + 1)-grams start in the pool.
    int64_t ngram = 0;
    for (size_t k = 0; k < counts.size() && attr_status().ok(); ++k) {
      const int64_t n = static_cast<int64_t>(k) + 1;
      const int64_t begin = counts[k];
      const int64_t end = k + 1 < counts.size() ? counts[k + 1] : static_cast<int64_t>(pool.size());
      if (begin < 0 || end > static_cast<int64_t>(pool.size()) || begin > end ||
          (end - begin) % n != 0) {
        SetAttrError(Error("ngram_counts does not split pool_int64s into ", n, "-grams"));
        break;
      }
      for (int64_t i = begin; i < end; i += n, ++ngram) {
        if (ngram >= static_cast<int64_t>(indexes.size())) {
          SetAttrError(Error("ngram_indexes has fewer entries than the pool has n-grams"));
          break;
        }
        grams_[std::vector<int64_t>(pool.begin() + i, pool.begin() + i + n)] = indexes[ngram];
        if (!weights_.empty() && ngram >= static_cast<int64_t>(weights_.size())) {
          SetAttrError(Error("weights has fewer entries than the pool has n-grams"));
        }
        weight_of_slot_[indexes[ngram]] =
            weights_.empty() || ngram >= static_cast<int64_t>(weights_.size()) ? 1.f
                                                                               : weights_[ngram];
      }
    }
    for (int64_t i : indexes) width_ = std::max(width_, i + 1);
  }

  absl::Status Reshape(ReshapeContext& ctx) override {
    KILN_RETURN_IF_ERROR(attr_status());
    if (ctx.inputs.empty() || !tensor_ops::IsIndexType(ctx.inputs[0].dtype)) {
      return Error("'X' must be int32 or int64 token ids");
    }
    const Shape& s = ctx.inputs[0].shape;
    if (s.rank() != 1 && s.rank() != 2)
      return Error("'X' must be [C] or [N, C], got ", s.ToString());
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = DType::kFloat32;
    ctx.output_shapes[0] = s.rank() == 1 ? Shape({width_}) : Shape({s[0], width_});
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& x = ctx.inputs[0];
    const int64_t rows = x.rank() == 1 ? 1 : x.dim(0);
    const int64_t cols = x.dim(x.rank() - 1);
    float* y = ctx.outputs[0].data<float>();
    std::fill(y, y + ctx.outputs[0].num_elements(), 0.f);
    std::vector<int64_t> gram;
    for (int64_t r = 0; r < rows; ++r) {
      float* out = y + r * width_;
      for (int64_t skip = 0; skip <= max_skip_; ++skip) {
        const int64_t step = skip + 1;
        const int64_t shortest = skip == 0 ? min_gram_ : std::max<int64_t>(min_gram_, 2);
        for (int64_t start = 0; start < cols; ++start) {
          gram.clear();
          for (int64_t n = 1; n <= max_gram_; ++n) {
            const int64_t pos = start + (n - 1) * step;
            if (pos >= cols) break;
            gram.push_back(tensor_ops::IndexAt(x, r * cols + pos));
            if (n < shortest) continue;
            auto it = grams_.find(gram);
            if (it != grams_.end()) out[it->second] += 1.f;
          }
        }
      }
      for (int64_t i = 0; i < width_; ++i) {
        auto w = weight_of_slot_.find(i);
        const float weight = w == weight_of_slot_.end() ? 1.f : w->second;
        if (mode_ == 1) out[i] = out[i] > 0 ? weight : 0.f;
        if (mode_ == 2) out[i] *= weight;
      }
    }
    return absl::OkStatus();
  }

 private:
  int64_t min_gram_, max_gram_, max_skip_;
  std::vector<float> weights_;
  int mode_ = 0;
  std::map<std::vector<int64_t>, int64_t> grams_;  // n-gram -> output slot
  std::map<int64_t, float> weight_of_slot_;
  int64_t width_ = 0;
};

KILN_REGISTER_KERNEL_CLASS("", "TfIdfVectorizer", TfIdfVectorizerKernel);

}  // namespace

KILN_KERNEL_FILE(text_ops);

}  // namespace kiln::kernels::text
