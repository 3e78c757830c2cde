// Helpers for the kiln::data pipeline tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kiln/data/dataset.h"

namespace kiln::data::testing {

inline Element Int64Element(int64_t v) { return Element({Tensor::Scalar<int64_t>(v)}); }

inline int64_t AsInt64(const Element& e, int component = 0) {
  return *e[component].data<int64_t>();
}

// Every element's first component (an int64 scalar), or the first error.
inline absl::StatusOr<std::vector<int64_t>> CollectInt64(const Dataset& ds,
                                                         const Options& options = {}) {
  auto it = ds.MakeIterator(options);
  if (!it.ok()) return it.status();
  std::vector<int64_t> out;
  while (true) {
    auto next = (*it)->GetNext();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    out.push_back(AsInt64(**next));
  }
  return out;
}

inline absl::StatusOr<std::vector<Element>> CollectAll(const Dataset& ds,
                                                       const Options& options = {}) {
  auto it = ds.MakeIterator(options);
  if (!it.ok()) return it.status();
  std::vector<Element> out;
  while (true) {
    auto next = (*it)->GetNext();
    if (!next.ok()) return next.status();
    if (!next->has_value()) break;
    out.push_back(std::move(**next));
  }
  return out;
}

inline std::vector<int64_t> Iota(int64_t begin, int64_t end) {
  std::vector<int64_t> v;
  for (int64_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

// x -> x + delta on int64 scalars (or any int64 tensor, element-wise).
inline MapFn AddFn(int64_t delta) {
  return [delta](Element e) -> absl::StatusOr<Element> {
    Tensor out(DType::kInt64, e[0].shape());
    const int64_t* in = e[0].data<int64_t>();
    for (int64_t i = 0; i < out.num_elements(); ++i) out.data<int64_t>()[i] = in[i] + delta;
    e[0] = std::move(out);
    return e;
  };
}

inline std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  std::string base = dir ? dir : "/tmp";
  return base + "/kiln_data_test_" + std::to_string(getpid()) + "_" + name;
}

}  // namespace kiln::data::testing
