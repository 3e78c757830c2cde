#include "kiln/ir/op_traits.h"

#include <variant>

namespace kiln::ir {
namespace {

struct OpTraitsEntry {
  absl::string_view domain;
  absl::string_view op;
  OpTraits traits;
};

constexpr OpTraits kRandom{.nondeterministic = true};
// A variable's value is what the last write left (kiln/ir/variable.h): a read gives another
// result after a write, and a write changes state, so neither may be evaluated ahead of time,
// merged with a twin or dropped by folding what reads it.
constexpr OpTraits kVariableState{.nondeterministic = true};

constexpr OpTraitsEntry kOpTraits[] = {
    {"", "Bernoulli", kRandom},
    {"", "Multinomial", kRandom},
    {"", "RandomNormal", kRandom},
    {"", "RandomNormalLike", kRandom},
    {"", "RandomUniform", kRandom},
    {"", "RandomUniformLike", kRandom},
    // TensorFlow's RandomUniform (kernels/cpu/tf_random.cc): seeded or not, each run draws
    // the next numbers of the stream.
    {"kiln", "RandomUniform", kRandom},
    {"kiln", "ReadVariable", kVariableState},
    {"kiln", "AssignVariable", kVariableState},
    {"kiln", "AssignAddVariable", kVariableState},
    {"kiln", "AssignSubVariable", kVariableState},
};

}  // namespace

OpTraits TraitsOf(absl::string_view domain, absl::string_view op) {
  for (const OpTraitsEntry& entry : kOpTraits) {
    if (entry.domain == domain && entry.op == op) return entry.traits;
  }
  return OpTraits{};
}

bool HasSubgraph(const Node& node) {
  for (const auto& [key, attr] : node.attrs) {
    if (std::holds_alternative<GraphPtr>(attr) ||
        std::holds_alternative<std::vector<GraphPtr>>(attr)) {
      return true;
    }
  }
  return false;
}

}  // namespace kiln::ir
