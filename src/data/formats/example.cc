#include "kiln/data/formats/example.h"

#include <cstring>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kiln/core/coding.h"
#include "kiln/core/status.h"

namespace kiln::data::formats {
namespace {

// Field numbers of tensorflow.Example, Features, the Features.feature map entry, Feature
// and the three lists (proto/tensorflow/core/example/{example,feature}.proto).
constexpr uint32_t kExampleFeatures = 1;
constexpr uint32_t kFeaturesFeature = 1;
constexpr uint32_t kMapKey = 1;
constexpr uint32_t kMapValue = 2;
constexpr uint32_t kBytesList = 1;
constexpr uint32_t kFloatList = 2;
constexpr uint32_t kInt64List = 3;
constexpr uint32_t kListValue = 1;

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// A cursor over protobuf wire bytes. Every method returns false on malformed input.
class WireReader {
 public:
  explicit WireReader(absl::string_view bytes)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())), end_(p_ + bytes.size()) {}

  bool done() const { return p_ >= end_; }

  bool ReadVarint(uint64_t* value) {
    absl::string_view rest(reinterpret_cast<const char*>(p_), end_ - p_);
    if (!coding::GetVarint64(&rest, value)) return false;
    p_ = reinterpret_cast<const uint8_t*>(rest.data());
    return true;
  }

  bool ReadTag(uint32_t* field, uint32_t* wire_type) {
    uint64_t tag;
    if (!ReadVarint(&tag) || tag > UINT32_MAX) return false;
    *field = static_cast<uint32_t>(tag >> 3);
    *wire_type = static_cast<uint32_t>(tag & 7);
    return *field != 0;
  }

  bool ReadBytes(absl::string_view* out) {
    uint64_t length;
    if (!ReadVarint(&length) || length > static_cast<uint64_t>(end_ - p_)) return false;
    *out = absl::string_view(reinterpret_cast<const char*>(p_), length);
    p_ += length;
    return true;
  }

  bool ReadFixed32(uint32_t* value) {
    if (end_ - p_ < 4) return false;
    *value = coding::DecodeFixed32(reinterpret_cast<const char*>(p_));
    p_ += 4;
    return true;
  }

  // Skips a field protobuf would keep as unknown. Groups (wire types 3 and 4) are obsolete
  // and never appear in tf.Example; they are rejected as malformed.
  bool Skip(uint32_t wire_type) {
    switch (wire_type) {
      case kVarint: {
        uint64_t ignored;
        return ReadVarint(&ignored);
      }
      case kFixed64:
        if (end_ - p_ < 8) return false;
        p_ += 8;
        return true;
      case kLengthDelimited: {
        absl::string_view ignored;
        return ReadBytes(&ignored);
      }
      case kFixed32:
        if (end_ - p_ < 4) return false;
        p_ += 4;
        return true;
      default:
        return false;
    }
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

using Bodies = absl::InlinedVector<absl::string_view, 1>;

// What one example holds for one spec feature.
struct FoundFeature {
  bool present = false;
  Bodies feature_bodies;  // serialized Feature messages of the last map entry (merged)
  // Resolved from feature_bodies:
  uint32_t kind = 0;  // kBytesList, kFloatList, kInt64List, or 0 when no list is set
  Bodies list_bodies;
  int64_t count = 0;
};

using KeyIndex = absl::flat_hash_map<absl::string_view, int>;

// Records, for each spec key, the Feature bodies of the last map entry with that key.
bool ScanExample(absl::string_view bytes, const KeyIndex& index, FoundFeature* found) {
  WireReader example(bytes);
  while (!example.done()) {
    uint32_t field, wire_type;
    if (!example.ReadTag(&field, &wire_type)) return false;
    if (field != kExampleFeatures || wire_type != kLengthDelimited) {
      if (!example.Skip(wire_type)) return false;
      continue;
    }
    absl::string_view features_bytes;
    if (!example.ReadBytes(&features_bytes)) return false;
    WireReader features(features_bytes);
    while (!features.done()) {
      if (!features.ReadTag(&field, &wire_type)) return false;
      if (field != kFeaturesFeature || wire_type != kLengthDelimited) {
        if (!features.Skip(wire_type)) return false;
        continue;
      }
      absl::string_view entry_bytes;
      if (!features.ReadBytes(&entry_bytes)) return false;
      WireReader entry(entry_bytes);
      absl::string_view key;
      Bodies values;
      while (!entry.done()) {
        if (!entry.ReadTag(&field, &wire_type)) return false;
        if (field == kMapKey && wire_type == kLengthDelimited) {
          if (!entry.ReadBytes(&key)) return false;
        } else if (field == kMapValue && wire_type == kLengthDelimited) {
          absl::string_view value;
          if (!entry.ReadBytes(&value)) return false;
          values.push_back(value);  // a repeated message field merges
        } else if (!entry.Skip(wire_type)) {
          return false;
        }
      }
      auto it = index.find(key);
      if (it == index.end()) continue;
      FoundFeature& f = found[it->second];
      f.present = true;
      f.feature_bodies = std::move(values);
    }
  }
  return true;
}

// Applies oneof semantics over the (merged) Feature bodies and counts the values of the list.
bool ResolveFeature(FoundFeature* f) {
  f->kind = 0;
  f->list_bodies.clear();
  for (absl::string_view body : f->feature_bodies) {
    WireReader feature(body);
    while (!feature.done()) {
      uint32_t field, wire_type;
      if (!feature.ReadTag(&field, &wire_type)) return false;
      if ((field == kBytesList || field == kFloatList || field == kInt64List) &&
          wire_type == kLengthDelimited) {
        absl::string_view list;
        if (!feature.ReadBytes(&list)) return false;
        if (field != f->kind) f->list_bodies.clear();  // another member of the oneof replaces
        f->kind = field;
        f->list_bodies.push_back(list);
      } else if (!feature.Skip(wire_type)) {
        return false;
      }
    }
  }
  int64_t count = 0;
  for (absl::string_view list_bytes : f->list_bodies) {
    WireReader list(list_bytes);
    while (!list.done()) {
      uint32_t field, wire_type;
      if (!list.ReadTag(&field, &wire_type)) return false;
      if (field != kListValue) {
        if (!list.Skip(wire_type)) return false;
        continue;
      }
      if (f->kind == kBytesList && wire_type == kLengthDelimited) {
        absl::string_view ignored;
        if (!list.ReadBytes(&ignored)) return false;
        ++count;
      } else if (f->kind == kFloatList && wire_type == kFixed32) {
        if (!list.Skip(kFixed32)) return false;
        ++count;
      } else if (f->kind == kFloatList && wire_type == kLengthDelimited) {
        absl::string_view packed;
        if (!list.ReadBytes(&packed) || packed.size() % 4 != 0) return false;
        count += packed.size() / 4;
      } else if (f->kind == kInt64List && wire_type == kVarint) {
        if (!list.Skip(kVarint)) return false;
        ++count;
      } else if (f->kind == kInt64List && wire_type == kLengthDelimited) {
        absl::string_view packed;
        if (!list.ReadBytes(&packed)) return false;
        WireReader varints(packed);
        while (!varints.done()) {
          uint64_t ignored;
          if (!varints.ReadVarint(&ignored)) return false;
          ++count;
        }
      } else if (!list.Skip(wire_type)) {
        return false;
      }
    }
  }
  f->count = count;
  return true;
}

// Writes the values of a resolved feature to out[0, count) (validated by ResolveFeature).
void CopyValues(const FoundFeature& f, float* out) {
  for (absl::string_view list_bytes : f.list_bodies) {
    WireReader list(list_bytes);
    while (!list.done()) {
      uint32_t field, wire_type;
      list.ReadTag(&field, &wire_type);
      if (field == kListValue && wire_type == kFixed32) {
        uint32_t bits;
        list.ReadFixed32(&bits);
        std::memcpy(out++, &bits, 4);
      } else if (field == kListValue && wire_type == kLengthDelimited) {
        absl::string_view packed;
        list.ReadBytes(&packed);
        std::memcpy(out, packed.data(), packed.size());
        out += packed.size() / 4;
      } else {
        list.Skip(wire_type);
      }
    }
  }
}

void CopyValues(const FoundFeature& f, int64_t* out) {
  for (absl::string_view list_bytes : f.list_bodies) {
    WireReader list(list_bytes);
    while (!list.done()) {
      uint32_t field, wire_type;
      list.ReadTag(&field, &wire_type);
      uint64_t value;
      if (field == kListValue && wire_type == kVarint) {
        list.ReadVarint(&value);
        *out++ = static_cast<int64_t>(value);
      } else if (field == kListValue && wire_type == kLengthDelimited) {
        absl::string_view packed;
        list.ReadBytes(&packed);
        WireReader varints(packed);
        while (!varints.done()) {
          varints.ReadVarint(&value);
          *out++ = static_cast<int64_t>(value);
        }
      } else {
        list.Skip(wire_type);
      }
    }
  }
}

void CopyValues(const FoundFeature& f, std::string* out) {
  for (absl::string_view list_bytes : f.list_bodies) {
    WireReader list(list_bytes);
    while (!list.done()) {
      uint32_t field, wire_type;
      list.ReadTag(&field, &wire_type);
      if (field == kListValue && wire_type == kLengthDelimited) {
        absl::string_view value;
        list.ReadBytes(&value);
        (out++)->assign(value.data(), value.size());
      } else {
        list.Skip(wire_type);
      }
    }
  }
}

void CopyFeatureValues(const FoundFeature& f, DType dtype, const Tensor& out, int64_t offset) {
  switch (dtype) {
    case DType::kFloat32:
      CopyValues(f, out.data<float>() + offset);
      break;
    case DType::kInt64:
      CopyValues(f, out.data<int64_t>() + offset);
      break;
    default:
      CopyValues(f, out.data<std::string>() + offset);
      break;
  }
}

uint32_t ListKindOf(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return kFloatList;
    case DType::kInt64:
      return kInt64List;
    default:
      return kBytesList;
  }
}

absl::string_view ListKindName(uint32_t kind) {
  switch (kind) {
    case kBytesList:
      return "bytes_list (string)";
    case kFloatList:
      return "float_list (float)";
    case kInt64List:
      return "int64_list (int64)";
    default:
      return "no list";
  }
}

std::string Where(const FeatureSpec& spec, int64_t example, bool batch) {
  return batch ? absl::StrCat("feature \"", spec.key, "\" in example ", example)
               : absl::StrCat("feature \"", spec.key, "\"");
}

}  // namespace

FeatureSpec FeatureSpec::FixedLen(std::string key, DType dtype, Shape shape,
                                  std::optional<Tensor> default_value) {
  FeatureSpec spec;
  spec.key = std::move(key);
  spec.kind = Kind::kFixedLen;
  spec.dtype = dtype;
  spec.shape = std::move(shape);
  spec.default_value = std::move(default_value);
  return spec;
}

FeatureSpec FeatureSpec::VarLen(std::string key, DType dtype) {
  FeatureSpec spec;
  spec.key = std::move(key);
  spec.kind = Kind::kVarLen;
  spec.dtype = dtype;
  return spec;
}

FeatureSpec FeatureSpec::Ragged(std::string key, DType dtype) {
  FeatureSpec spec = VarLen(std::move(key), dtype);
  spec.kind = Kind::kRagged;
  return spec;
}

std::vector<std::string> ExampleSpec::OutputNames() const {
  std::vector<std::string> names;
  for (const FeatureSpec& f : features) {
    switch (f.kind) {
      case FeatureSpec::Kind::kFixedLen:
        names.push_back(f.key);
        break;
      case FeatureSpec::Kind::kVarLen:
        names.push_back(f.key + "/indices");
        names.push_back(f.key + "/values");
        names.push_back(f.key + "/dense_shape");
        break;
      case FeatureSpec::Kind::kRagged:
        names.push_back(f.key + "/values");
        names.push_back(f.key + "/row_splits");
        break;
    }
  }
  return names;
}

absl::Status ExampleSpec::Validate() const {
  absl::flat_hash_set<absl::string_view> keys;
  for (const FeatureSpec& f : features) {
    if (f.key.empty()) return absl::InvalidArgumentError("parse_example: empty feature key");
    if (!keys.insert(f.key).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("parse_example: feature \"", f.key, "\" appears twice in the spec"));
    }
    if (f.dtype != DType::kFloat32 && f.dtype != DType::kInt64 && f.dtype != DType::kString) {
      return absl::InvalidArgumentError(absl::StrCat("parse_example: feature \"", f.key,
                                                     "\" has dtype ", DTypeName(f.dtype),
                                                     "; tf.Example holds float, int64 or string"));
    }
    if (f.kind != FeatureSpec::Kind::kFixedLen) continue;
    for (int64_t d : f.shape.dims()) {
      if (d < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("parse_example: feature \"", f.key, "\" has shape ", f.shape.ToString(),
                         "; fixed-length features need known dimensions"));
      }
    }
    if (f.default_value.has_value()) {
      const Tensor& d = *f.default_value;
      if (d.dtype() != f.dtype ||
          (d.num_elements() != f.shape.num_elements() && d.num_elements() != 1)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parse_example: default of feature \"", f.key, "\" is ", DTypeName(d.dtype()),
            d.shape().ToString(), " but the feature is ", DTypeName(f.dtype), f.shape.ToString()));
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<Tensor>> ParseExamples(const Tensor& serialized,
                                                  const ExampleSpec& spec) {
  if (serialized.dtype() != DType::kString || serialized.rank() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("parse_example: input must be a string scalar or vector, got ",
                     DTypeName(serialized.dtype()), serialized.shape().ToString()));
  }
  KILN_RETURN_IF_ERROR(spec.Validate());
  const bool batch = serialized.rank() == 1;
  const int64_t num_examples = batch ? serialized.dim(0) : 1;
  const size_t num_features = spec.features.size();
  const std::string* inputs = serialized.data<std::string>();

  KeyIndex index;
  for (size_t i = 0; i < num_features; ++i) index[spec.features[i].key] = static_cast<int>(i);

  std::vector<FoundFeature> found(static_cast<size_t>(num_examples) * num_features);
  for (int64_t e = 0; e < num_examples; ++e) {
    FoundFeature* row = &found[e * num_features];
    if (!ScanExample(inputs[e], index, row)) {
      return absl::InvalidArgumentError(
          absl::StrCat("parse_example: ", batch ? absl::StrCat("example ", e, " ") : "",
                       "is not a valid serialized tf.Example (", inputs[e].size(), " bytes)"));
    }
    for (size_t i = 0; i < num_features; ++i) {
      const FeatureSpec& fs = spec.features[i];
      FoundFeature& f = row[i];
      if (!f.present) continue;
      if (!ResolveFeature(&f)) {
        return absl::InvalidArgumentError(absl::StrCat("parse_example: ", Where(fs, e, batch),
                                                       " is not a valid serialized tf.Feature"));
      }
      if (f.kind == 0) {
        f.present = false;  // an empty Feature counts as absent, as in TensorFlow
        continue;
      }
      if (f.kind != ListKindOf(fs.dtype)) {
        return absl::InvalidArgumentError(
            absl::StrCat("parse_example: ", Where(fs, e, batch), " holds ", ListKindName(f.kind),
                         " but the spec expects ", DTypeName(fs.dtype)));
      }
      if (fs.kind == FeatureSpec::Kind::kFixedLen && f.count != fs.shape.num_elements()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parse_example: ", Where(fs, e, batch), " has ", f.count, " values but shape ",
            fs.shape.ToString(), " needs ", fs.shape.num_elements()));
      }
    }
  }

  std::vector<Tensor> outputs;
  for (size_t i = 0; i < num_features; ++i) {
    const FeatureSpec& fs = spec.features[i];
    if (fs.kind == FeatureSpec::Kind::kFixedLen) {
      Shape shape = fs.shape;
      if (batch) shape.insert(0, num_examples);
      Tensor out(fs.dtype, shape);
      const int64_t per_example = fs.shape.num_elements();
      for (int64_t e = 0; e < num_examples; ++e) {
        const FoundFeature& f = found[e * num_features + i];
        if (f.present) {
          CopyFeatureValues(f, fs.dtype, out, e * per_example);
          continue;
        }
        if (!fs.default_value.has_value()) {
          return absl::InvalidArgumentError(absl::StrCat("parse_example: required ",
                                                         Where(fs, e, batch),
                                                         " is missing (no default_value given)"));
        }
        const Tensor& d = *fs.default_value;
        VisitDType(fs.dtype, [&](auto tag) {
          using T = decltype(tag);
          const T* src = d.data<T>();
          T* dst = out.data<T>() + e * per_example;
          for (int64_t k = 0; k < per_example; ++k) dst[k] = src[d.num_elements() == 1 ? 0 : k];
        });
      }
      outputs.push_back(std::move(out));
      continue;
    }
    int64_t total = 0;
    int64_t max_count = 0;
    for (int64_t e = 0; e < num_examples; ++e) {
      const FoundFeature& f = found[e * num_features + i];
      const int64_t count = f.present ? f.count : 0;
      total += count;
      max_count = std::max(max_count, count);
    }
    Tensor values(fs.dtype, Shape{total});
    int64_t offset = 0;
    std::vector<int64_t> splits{0};
    for (int64_t e = 0; e < num_examples; ++e) {
      const FoundFeature& f = found[e * num_features + i];
      if (f.present) {
        CopyFeatureValues(f, fs.dtype, values, offset);
        offset += f.count;
      }
      splits.push_back(offset);
    }
    if (fs.kind == FeatureSpec::Kind::kVarLen) {
      const int64_t index_rank = batch ? 2 : 1;
      Tensor indices(DType::kInt64, Shape{total, index_rank});
      int64_t* idx = indices.data<int64_t>();
      for (int64_t e = 0; e < num_examples; ++e) {
        for (int64_t k = 0; k < splits[e + 1] - splits[e]; ++k) {
          if (batch) *idx++ = e;
          *idx++ = k;
        }
      }
      outputs.push_back(std::move(indices));
      outputs.push_back(std::move(values));
      outputs.push_back(batch ? Tensor::FromVector<int64_t>({num_examples, max_count})
                              : Tensor::FromVector<int64_t>({max_count}));
    } else {
      outputs.push_back(std::move(values));
      outputs.push_back(Tensor::FromVector<int64_t>(splits));
    }
  }
  return outputs;
}

}  // namespace kiln::data::formats
