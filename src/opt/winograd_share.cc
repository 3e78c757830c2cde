#include "opt/winograd_share.h"

#include "absl/strings/str_cat.h"
#include "kiln/ir/fused_post_ops.h"
#include "opt/graph_view.h"

namespace kiln::opt {

bool WinogradCarriesMostWork(const ir::Graph& g, int64_t channel_block, std::string* share) {
  double winograd = 0, total = 0;
  for (ir::NodeId id = 0; id < g.num_nodes(); ++id) {
    const ir::Node& n = g.node(id);
    if (n.removed || !IsConv2D(g, n)) continue;
    const Tensor& w = *g.value(n.inputs[1]).constant;
    const ir::TensorType& y = g.value(n.outputs[0]).type;
    if (!y.rank_known || y.rank() != 4 || !y.dims[2].is_known() || !y.dims[3].is_known()) {
      return false;
    }
    const double macs = static_cast<double>(w.num_elements()) *
                        static_cast<double>(y.dims[2].value) * static_cast<double>(y.dims[3].value);
    total += macs;
    auto all_ones = [&](const char* attr) {
      for (int64_t v : n.GetInts(attr)) {
        if (v != 1) return false;
      }
      return true;
    };
    if (!ir::IsFusedConvDepthwise(n) && w.dim(2) == 3 && w.dim(3) == 3 &&
        n.GetInt("group", 1) == 1 && w.dim(0) % channel_block == 0 &&
        w.dim(1) % channel_block == 0 && all_ones("strides") && all_ones("dilations") &&
        n.GetString("auto_pad", "NOTSET") == "NOTSET") {
      winograd += macs;
    }
  }
  if (total <= 0 || 4 * winograd < 3 * total) return false;
  *share = absl::StrCat(static_cast<int>(100 * winograd / total), "%");
  return true;
}

}  // namespace kiln::opt
