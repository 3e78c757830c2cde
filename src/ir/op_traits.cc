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
