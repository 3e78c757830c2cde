// Helpers shared by the int8 tests (tests/opt/fuse_qdq*_test.cc, tests/kernels_nn/
// int8_conv_test.cc): seeded random integer and float tensors, and the one-output nodes and
// float scalar constants their hand-built graphs are made of.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ir/graph.h"

namespace kiln::test_util {

// A tensor of `shape` with integers uniform in [lo, hi], stored as T.
template <typename T>
Tensor RandomInts(Shape shape, uint32_t seed, int lo, int hi) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  Tensor t(DTypeOf<T>::value, shape);
  for (T& v : t.span<T>()) v = static_cast<T>(dist(rng));
  return t;
}

// A float tensor of `shape`, uniform in [lo, hi).
inline Tensor RandomFloats(Shape shape, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  Tensor t(DType::kFloat32, shape);
  for (float& v : t.span<float>()) v = dist(rng);
  return t;
}

// Adds a one-output node named `name` whose output value has the same name; returns it.
inline ir::ValueId Node1(ir::Graph& g, const std::string& op, std::vector<ir::ValueId> inputs,
                         const std::string& name, std::map<std::string, ir::Attribute> attrs = {}) {
  const ir::NodeId id = g.AddNode(op, std::move(inputs), 1, std::move(attrs), name);
  g.value(g.node(id).outputs[0]).name = name;
  return g.node(id).outputs[0];
}

// A float scalar constant.
inline ir::ValueId F(ir::Graph& g, const std::string& name, float v) {
  return g.AddConstant(name, Tensor::FromVector<float>({v}, Shape{}));
}

}  // namespace kiln::test_util
