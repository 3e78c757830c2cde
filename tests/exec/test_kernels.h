// Small kernels in domain "test" so that executor tests do not depend on the real kernel
// library's progress, plus helpers to build graphs of them.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "kiln/ir/graph.h"

namespace kiln::exec::testing {

// Calls of test::Count's Compute (to tell folded nodes from run ones).
std::atomic<int>& CountCalls();
// test::Rendezvous: each Compute waits (up to 5 s) until `RendezvousParties()` Computes have
// arrived; fails otherwise. Proves that independent steps run at the same time.
std::atomic<int>& RendezvousArrivals();

ir::ValueId AddOp(ir::Graph& g, const std::string& op, std::vector<ir::ValueId> inputs,
                  std::map<std::string, ir::Attribute> attrs = {});
ir::ValueId FloatInput(ir::Graph& g, const std::string& name, std::vector<int64_t> dims);
Tensor Floats(std::vector<float> values, Shape shape);
std::vector<float> ToVector(const Tensor& t);

}  // namespace kiln::exec::testing
