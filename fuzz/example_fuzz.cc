// tf.Example parsing of arbitrary bytes with a spec covering every feature kind and dtype.
#include <cstddef>
#include <cstdint>
#include <string>

#include "kiln/data/formats/example.h"

using kiln::DType;
using kiln::Tensor;
using kiln::data::formats::ExampleSpec;
using kiln::data::formats::FeatureSpec;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ExampleSpec* spec = [] {
    auto* s = new ExampleSpec;
    s->features.push_back(FeatureSpec::FixedLen("a", DType::kFloat32, {2}, Tensor::Scalar(0.f)));
    s->features.push_back(FeatureSpec::FixedLen("b", DType::kInt64));
    s->features.push_back(
        FeatureSpec::FixedLen("c", DType::kString, {}, Tensor::Scalar(std::string())));
    s->features.push_back(FeatureSpec::VarLen("d", DType::kInt64));
    s->features.push_back(FeatureSpec::VarLen("e", DType::kString));
    s->features.push_back(FeatureSpec::Ragged("f", DType::kFloat32));
    return s;
  }();
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)kiln::data::formats::ParseExamples(Tensor::Scalar(bytes), *spec);
  // The same bytes as a batch of two (split in the middle).
  Tensor batch(DType::kString, kiln::Shape{2});
  batch.data<std::string>()[0] = bytes.substr(0, size / 2);
  batch.data<std::string>()[1] = bytes.substr(size / 2);
  (void)kiln::data::formats::ParseExamples(batch, *spec);
  return 0;
}
