// kiln::HashTableLookup(keys, default_value, table_keys, table_values) -> values: TensorFlow's
// LookupTableFindV2 on a static hash table whose contents the importer read (vocabulary files
// from assets/, LookupTableImportV2 constants). Missing keys give default_value (a scalar, or
// one default per key). Keys are strings or integers.
#include <cstring>
#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "kiln/core/status.h"
#include "kiln/kernels/kernel.h"

namespace kiln::kernels {
namespace {

int64_t IntAt(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kInt64: return t.data<int64_t>()[i];
    case DType::kInt32: return t.data<int32_t>()[i];
    default: return 0;
  }
}

struct Index {
  absl::flat_hash_map<std::string, int64_t> strings;
  absl::flat_hash_map<int64_t, int64_t> ints;
};

Index BuildIndex(const Tensor& keys) {
  Index index;
  const int64_t n = keys.num_elements();
  // The first occurrence wins, as a table initialized from a file keeps the first line.
  if (keys.dtype() == DType::kString) {
    const std::string* k = keys.data<std::string>();
    index.strings.reserve(n);
    for (int64_t i = 0; i < n; ++i) index.strings.emplace(k[i], i);
  } else {
    index.ints.reserve(n);
    for (int64_t i = 0; i < n; ++i) index.ints.emplace(IntAt(keys, i), i);
  }
  return index;
}

class HashTableLookupKernel : public OpKernel {
 public:
  explicit HashTableLookupKernel(const ir::Node& node) : node_(node.Describe()) {}

  absl::Status Reshape(ReshapeContext& ctx) override {
    if (ctx.inputs.size() != 4) return Error("expects keys, default, table_keys, table_values");
    const DType key = ctx.inputs[0].dtype, table_key = ctx.inputs[2].dtype;
    const bool key_ok = key == table_key || ((key == DType::kInt32 || key == DType::kInt64) &&
                                             (table_key == DType::kInt32 ||
                                              table_key == DType::kInt64));
    if (!key_ok) {
      return Error(absl::StrCat("keys are ", DTypeName(key), ", the table's are ",
                                DTypeName(table_key)));
    }
    if (key != DType::kString && key != DType::kInt32 && key != DType::kInt64) {
      return Error(absl::StrCat("unsupported key type ", DTypeName(key)));
    }
    if (ctx.inputs[1].dtype != ctx.inputs[3].dtype) {
      return Error("default value and table values differ in type");
    }
    if (ctx.inputs[2].shape.num_elements() != ctx.inputs[3].shape.num_elements()) {
      return Error("table keys and values differ in number");
    }
    const int64_t defaults = ctx.inputs[1].shape.num_elements();
    if (defaults != 1 && defaults != ctx.inputs[0].shape.num_elements()) {
      return Error("default value must be a scalar or one per key");
    }
    if (ctx.inputs[2].constant != nullptr) {
      index_ = std::make_shared<Index>(BuildIndex(*ctx.inputs[2].constant));
    }
    ctx.SetNumOutputs(1);
    ctx.output_dtypes[0] = ctx.inputs[3].dtype;
    ctx.output_shapes[0] = ctx.inputs[0].shape;
    return absl::OkStatus();
  }

  absl::Status Compute(ComputeContext& ctx) const override {
    const Tensor& keys = ctx.inputs[0];
    const Tensor& defaults = ctx.inputs[1];
    const Tensor& values = ctx.inputs[3];
    std::shared_ptr<Index> index = index_;
    if (index == nullptr) index = std::make_shared<Index>(BuildIndex(ctx.inputs[2]));
    Tensor& out = ctx.outputs[0];
    const int64_t n = keys.num_elements();
    const bool per_key_default = defaults.num_elements() != 1;
    const size_t elem = DTypeSize(values.dtype());
    const bool strings = values.dtype() == DType::kString;
    for (int64_t i = 0; i < n; ++i) {
      int64_t found = -1;
      if (keys.dtype() == DType::kString) {
        auto it = index->strings.find(keys.data<std::string>()[i]);
        if (it != index->strings.end()) found = it->second;
      } else {
        auto it = index->ints.find(IntAt(keys, i));
        if (it != index->ints.end()) found = it->second;
      }
      const Tensor& src = found >= 0 ? values : defaults;
      const int64_t j = found >= 0 ? found : (per_key_default ? i : 0);
      if (strings) {
        out.data<std::string>()[i] = src.data<std::string>()[j];
      } else {
        std::memcpy(static_cast<char*>(out.raw_data()) + i * elem,
                    static_cast<const char*>(src.raw_data()) + j * elem, elem);
      }
    }
    return absl::OkStatus();
  }

 private:
  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(node_, ": ", message));
  }
  std::string node_;
  std::shared_ptr<Index> index_;
};

KILN_REGISTER_KERNEL_CLASS("kiln", "HashTableLookup", HashTableLookupKernel);

}  // namespace

KILN_KERNEL_FILE(tf_lookup);

}  // namespace kiln::kernels
