// TF1 while loops (tf.while_loop in graph mode, "v1 control flow") raised to IR Loop nodes.
//
// tf.while_loop writes a frame: for each loop variable k
//   Enter_k (frame_name, is_constant=false) -> Merge_k(Enter_k, NextIteration_k)
//   cond(Merge_0..n) -> LoopCond -> Switch_k(Merge_k, LoopCond)
//   Switch_k:1 -> Identity -> body -> NextIteration_k -> back to Merge_k
//   Switch_k:0 -> Exit_k (the value after the last iteration)
// and one Enter(is_constant=true) per outer tensor the loop reads (a loop invariant).
// TensorFlow's executor runs it as a dataflow machine with frames and iterations. Kiln has no
// frames, so the converter rebuilds the functional form TF2 would have written
// (While(cond, body)) as an ONNX Loop: the first test of the condition runs before the Loop, and
// the Loop body computes body(vars) and then cond(body(vars)) for the next trip. The same
// GraphDef nodes are converted three times, in three scopes that bind the Merges differently:
// cond0 (Merge_k = initial values, in the enclosing graph), body (Merge_k = Switch_k:1 = the
// body's inputs) and cond1 (Merge_k = NextIteration_k's input, inside the body).
//
// Frames are found as TensorFlow's executor finds them (BuildControlFlowInfo): a walk from the
// nodes without inputs along data and control edges, where an Enter starts its frame_name
// frame and an Exit returns to the enclosing one; a node reached from two frames is invalid,
// as in TensorFlow. Unlike TensorFlow, an Enter is placed in the frame it starts and an Exit in
// the frame it returns to, which are the scopes that convert them here.
#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "import/tf/converter.h"
#include "import/tf/converter_internal.h"
#include "kiln/core/status.h"

namespace kiln::import::tf {

using tensorflow::NodeDef;

namespace {

// The Ref* forms are what tf.while_loop writes for TF1 reference variables (VariableV2).
bool IsEnter(const NodeDef& n) { return n.op() == "Enter" || n.op() == "RefEnter"; }
bool IsExit(const NodeDef& n) { return n.op() == "Exit" || n.op() == "RefExit"; }
bool IsNextIteration(const NodeDef& n) {
  return n.op() == "NextIteration" || n.op() == "RefNextIteration";
}
bool IsMerge(const NodeDef& n) { return n.op() == "Merge" || n.op() == "RefMerge"; }
bool IsSwitch(const NodeDef& n) { return n.op() == "Switch" || n.op() == "RefSwitch"; }

std::string FrameNameOf(const NodeDef& enter) {
  const tensorflow::AttrValue* a = FindAttr(enter, "frame_name");
  return a == nullptr ? std::string() : a->s();
}

bool IsConstantEnter(const NodeDef& enter) {
  const tensorflow::AttrValue* a = FindAttr(enter, "is_constant");
  return a != nullptr && a->b();
}

std::string DescribeFrame(const std::string& frame) {
  return frame.empty() ? std::string("the top level")
                       : absl::StrCat("while loop frame '", frame, "'");
}

// The first data input ("" when there is none).
std::string DataInput(const NodeDef& node, int which = 0) {
  for (const std::string& in : node.input()) {
    if (absl::StartsWith(in, "^")) continue;
    if (which-- == 0) return in;
  }
  return std::string();
}

// One loop-carried value.
struct LoopVar {
  const NodeDef* enter = nullptr;
  const NodeDef* merge = nullptr;
  const NodeDef* sw = nullptr;
  const NodeDef* next = nullptr;
};

// A frame's loop structure, checked.
struct LoopFrame {
  std::string name;
  const NodeDef* loop_cond = nullptr;
  std::vector<LoopVar> vars;
  std::map<std::string, int> var_of_merge;
  std::map<std::string, int> var_of_switch;
};

// Frame conversions (three per Loop built) allowed per node of a body, and at most: a loop
// is built once per scope that needs it, a few times in a real graph.
constexpr int64_t kMaxFrameConversionsPerNode = 16;
constexpr int64_t kMaxFrameConversions = int64_t{1} << 20;

// The frames of one Body.
struct BodyFrames {
  bool has_loops = false;
  int64_t conversions_left = 0;
  std::map<std::string, std::string> frame_of;  // node -> frame ("" the top level)
  std::map<std::string, std::string> parent;    // frame -> enclosing frame
  // node -> why it belongs to no single frame, and the frames involved.
  struct Invalid {
    std::string why;
    std::set<std::string> frames;
  };
  std::map<std::string, Invalid> invalid;
  std::map<std::string, absl::StatusOr<std::shared_ptr<const LoopFrame>>> loops;
};

}  // namespace

struct WhileLoops {
  // A scope converting the inside of a frame, and the scope of the enclosing frame (where the
  // Loop node goes and where loop invariants are read).
  struct LoopScope {
    std::string frame;
    Scope* parent = nullptr;
  };
  std::map<const Body*, BodyFrames> bodies;
  std::map<const Scope*, LoopScope> loop_scopes;
  // (enclosing scope, frame) -> the Loop's outputs, one per loop variable.
  std::map<std::pair<const Scope*, std::string>, std::vector<TfValue>> built;
  std::set<std::pair<const Scope*, std::string>> building;
  std::vector<std::unique_ptr<Scope>> scopes;
  std::vector<std::unique_ptr<GraphFrame>> frames;
};

namespace {

BodyFrames AnalyzeFrames(const Body& body) {
  BodyFrames out;
  for (const auto& [name, node] : body.nodes) {
    if (IsEnter(*node)) out.has_loops = true;
  }
  if (!out.has_loops) return out;
  out.conversions_left = std::min(
      kMaxFrameConversions, kMaxFrameConversionsPerNode * static_cast<int64_t>(body.nodes.size()));
  std::map<std::string, std::vector<const NodeDef*>> consumers;
  std::deque<const NodeDef*> queue;
  for (const auto& [name, node] : body.nodes) {
    bool has_input = false;
    for (const std::string& in : node->input()) {
      auto it = body.nodes.find(RefNode(in));
      if (it == body.nodes.end()) continue;  // a function argument
      has_input = true;
      consumers[it->first].push_back(node);
    }
    if (!has_input) {
      out.frame_of[name] = "";
      queue.push_back(node);
    }
  }
  while (!queue.empty()) {
    const NodeDef* n = queue.front();
    queue.pop_front();
    const std::string frame = out.frame_of[n->name()];
    for (const NodeDef* c : consumers[n->name()]) {
      if (out.invalid.count(c->name())) continue;
      std::string f = frame;
      if (IsEnter(*c)) {
        f = FrameNameOf(*c);
        if (f.empty()) {
          out.invalid[c->name()] = {"an Enter without a frame_name", {frame}};
          continue;
        }
        auto [it, inserted] = out.parent.emplace(f, frame);
        if (!inserted && it->second != frame) {
          out.invalid[c->name()] = {
              absl::StrCat("enters ", DescribeFrame(f), " from ", DescribeFrame(frame),
                           ", but another Enter of that frame comes from ",
                           DescribeFrame(it->second)),
              {f}};
          continue;
        }
      } else if (IsExit(*c)) {
        auto p = out.parent.find(frame);
        if (p == out.parent.end()) {
          out.invalid[c->name()] = {"an Exit outside any while loop", {frame}};
          continue;
        }
        f = p->second;
      }
      auto [it, inserted] = out.frame_of.emplace(c->name(), f);
      if (inserted) {
        queue.push_back(c);
      } else if (it->second != f) {
        out.invalid[c->name()] = {
            absl::StrCat("its inputs come from different frames: '", n->name(), "' is in ",
                         DescribeFrame(frame), ", another input in ", DescribeFrame(it->second),
                         " (TensorFlow refuses this graph too)"),
            {f, it->second}};
      }
    }
  }
  return out;
}

std::string FrameOf(const BodyFrames& frames, const std::string& node) {
  auto it = frames.frame_of.find(node);
  return it == frames.frame_of.end() ? std::string() : it->second;
}

absl::StatusOr<std::shared_ptr<const LoopFrame>> AnalyzeLoop(const Body& body,
                                                             const BodyFrames& frames,
                                                             const std::string& frame) {
  auto lf = std::make_shared<LoopFrame>();
  lf->name = frame;
  std::vector<const NodeDef*> members;
  for (const auto& [name, node] : body.nodes) {
    if (FrameOf(frames, name) != frame || !frames.frame_of.count(name)) continue;
    members.push_back(node);
    if (node->op() != "LoopCond") continue;
    if (lf->loop_cond != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(DescribeFrame(frame),
                                                     " has two LoopCond nodes, '",
                                                     lf->loop_cond->name(), "' and '", name, "'"));
    }
    lf->loop_cond = node;
  }
  if (lf->loop_cond == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(DescribeFrame(frame), " has no LoopCond"));
  }
  for (const NodeDef* node : members) {
    if (!IsSwitch(*node) || node->input_size() < 2) continue;
    const std::string pred = DataInput(*node, 1);
    if (RefNode(pred) != lf->loop_cond->name()) continue;
    LoopVar var;
    var.sw = node;
    auto merge = body.nodes.find(RefNode(DataInput(*node, 0)));
    if (merge == body.nodes.end() || !IsMerge(*merge->second) ||
        FrameOf(frames, merge->first) != frame) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", node->name(), "' (op ", node->op(), ") switches on the LoopCond of ",
          DescribeFrame(frame), " but does not read a Merge of that frame"));
    }
    var.merge = merge->second;
    for (const std::string& in : var.merge->input()) {
      if (absl::StartsWith(in, "^")) continue;
      auto it = body.nodes.find(RefNode(in));
      if (it == body.nodes.end()) continue;
      if (IsEnter(*it->second) && !IsConstantEnter(*it->second) &&
          FrameNameOf(*it->second) == frame && var.enter == nullptr) {
        var.enter = it->second;
      } else if (IsNextIteration(*it->second) && var.next == nullptr) {
        var.next = it->second;
      } else {
        var.enter = var.next = nullptr;  // a third input: not a loop variable's Merge
        break;
      }
    }
    if (var.enter == nullptr || var.next == nullptr || var.merge->input_size() < 2) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node '", var.merge->name(), "' (op ", var.merge->op(), ") of ", DescribeFrame(frame),
          " must merge one Enter (is_constant=false) of its frame and one NextIteration; it "
          "reads ",
          absl::StrJoin(var.merge->input(), ", ")));
    }
    if (lf->var_of_merge.count(var.merge->name())) {
      return absl::InvalidArgumentError(
          absl::StrCat("node '", var.merge->name(), "' of ", DescribeFrame(frame),
                       " is read by two Switches on the loop condition"));
    }
    const int index = static_cast<int>(lf->vars.size());
    lf->var_of_merge[var.merge->name()] = index;
    lf->var_of_switch[node->name()] = index;
    lf->vars.push_back(var);
  }
  if (lf->vars.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeFrame(frame), " has no Switch on its LoopCond '", lf->loop_cond->name(), "'"));
  }
  return std::shared_ptr<const LoopFrame>(std::move(lf));
}

absl::StatusOr<const LoopFrame*> LoopOf(const Body& body, BodyFrames& frames,
                                        const std::string& frame) {
  auto it = frames.loops.find(frame);
  if (it == frames.loops.end()) {
    // A node that mixes this frame with another makes the frame's structure meaningless.
    for (const auto& [name, bad] : frames.invalid) {
      if (!bad.frames.count(frame)) continue;
      auto error = absl::InvalidArgumentError(absl::StrCat("node '", name, "' (op ",
                                                           body.nodes.at(name)->op(), ") of ",
                                                           DescribeFrame(frame), ": ", bad.why));
      it = frames.loops.emplace(frame, error).first;
      return error;
    }
    it = frames.loops.emplace(frame, AnalyzeLoop(body, frames, frame)).first;
  }
  if (!it->second.ok()) return it->second.status();
  return it->second->get();
}

const WhileLoops::LoopScope* FindLoopScope(const WhileLoops& loops, const Scope* scope) {
  // A v1 conditional inside a loop body converts in a branch scope whose value_parent chain
  // leads to the loop's scope.
  for (const Scope* s = scope; s != nullptr; s = s->value_parent) {
    auto it = loops.loop_scopes.find(s);
    if (it != loops.loop_scopes.end()) return &it->second;
  }
  return nullptr;
}

// Builds the Loop for `lf` in `parent` (a scope of the enclosing frame) once; returns its
// outputs, one per loop variable.
absl::StatusOr<const std::vector<TfValue>*> BuildLoop(Converter& conv, WhileLoops& loops,
                                                      Scope* parent, const LoopFrame& lf) {
  const auto key = std::make_pair(static_cast<const Scope*>(parent), lf.name);
  if (auto it = loops.built.find(key); it != loops.built.end()) return &it->second;
  if (!loops.building.insert(key).second) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeFrame(lf.name), " needs its own results to start"));
  }
  auto new_scope = [&](GraphFrame* frame) {
    auto s = std::make_unique<Scope>();
    s->body = parent->body;
    s->frame = frame;
    s->prefix = parent->prefix;
    Scope* ptr = s.get();
    loops.scopes.push_back(std::move(s));
    loops.loop_scopes[ptr] = {lf.name, parent};
    return ptr;
  };
  ir::Graph& outer = *parent->frame->graph;
  std::vector<TfValue> initial;
  for (const LoopVar& var : lf.vars) {
    KILN_ASSIGN_OR_RETURN(TfValue v, conv.GetTensor(parent, DataInput(*var.enter)));
    if (v.id == ir::kNoValue) {
      return absl::UnimplementedError(
          absl::StrCat(DescribeNode(parent, *var.enter), ": a loop variable that is not a tensor"));
    }
    initial.push_back(v);
  }
  const std::string pred_ref = DataInput(*lf.loop_cond);
  // The first test, in the enclosing graph.
  Scope* cond0 = new_scope(parent->frame);
  for (size_t k = 0; k < lf.vars.size(); ++k) {
    cond0->feeds[absl::StrCat(lf.vars[k].merge->name(), ":0")] = initial[k];
  }
  KILN_ASSIGN_OR_RETURN(TfValue pred0, conv.GetTensor(cond0, pred_ref));
  if (pred0.id == ir::kNoValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeNode(cond0, *lf.loop_cond), ": the loop condition is not a tensor"));
  }
  // Loop body: (iteration, condition, vars...) -> (cond(next), next...).
  auto sub = std::make_shared<ir::Graph>();
  sub->name = lf.name;
  auto frame = std::make_unique<GraphFrame>();
  frame->graph = sub.get();
  frame->parent = parent->frame;
  GraphFrame* body_frame = frame.get();
  loops.frames.push_back(std::move(frame));
  sub->inputs.push_back(
      sub->AddValue(conv.UniqueName(lf.name + "/iter"), ir::TensorType::Of(DType::kInt64, {})));
  sub->inputs.push_back(
      sub->AddValue(conv.UniqueName(lf.name + "/cond_in"), ir::TensorType::Of(DType::kBool, {})));
  Scope* body = new_scope(body_frame);
  for (size_t k = 0; k < lf.vars.size(); ++k) {
    TfValue local;
    local.id = sub->AddValue(conv.UniqueName(lf.vars[k].merge->name()),
                             ir::TensorType{outer.value(initial[k].id).type.dtype});
    sub->inputs.push_back(local.id);
    // Switch:1 is what the body reads; the Merge itself may be read by nodes of the condition
    // that the body also uses.
    body->feeds[absl::StrCat(lf.vars[k].merge->name(), ":0")] = local;
    body->feeds[absl::StrCat(lf.vars[k].sw->name(), ":1")] = local;
  }
  std::vector<TfValue> next;
  for (const LoopVar& var : lf.vars) {
    KILN_ASSIGN_OR_RETURN(TfValue v, conv.GetTensor(body, DataInput(*var.next)));
    if (v.id == ir::kNoValue) {
      return absl::UnimplementedError(
          absl::StrCat(DescribeNode(body, *var.next), ": a loop variable that is not a tensor"));
    }
    next.push_back(v);
  }
  Scope* cond1 = new_scope(body_frame);
  for (size_t k = 0; k < lf.vars.size(); ++k) {
    cond1->feeds[absl::StrCat(lf.vars[k].merge->name(), ":0")] = next[k];
  }
  KILN_ASSIGN_OR_RETURN(TfValue pred1, conv.GetTensor(cond1, pred_ref));
  if (pred1.id == ir::kNoValue) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeNode(cond1, *lf.loop_cond), ": the loop condition is not a tensor"));
  }
  const std::string name = parent->prefix + lf.name;
  sub->outputs.push_back(conv.AddIrNode(*sub, "Identity", {pred1.id}, 1, {}, name + "/cond")[0]);
  for (const TfValue& v : next) {
    sub->outputs.push_back(conv.AddIrNode(*sub, "Identity", {v.id}, 1, {}, name + "/next")[0]);
  }
  std::vector<ir::ValueId> inputs = {ir::kNoValue, pred0.id};
  for (const TfValue& v : initial) inputs.push_back(v.id);
  std::vector<ir::ValueId> results = conv.AddIrNode(
      outer, "Loop", inputs, static_cast<int>(lf.vars.size()), {{"body", ir::GraphPtr(sub)}}, name);
  std::vector<TfValue> outputs;
  for (ir::ValueId id : results) {
    TfValue v;
    v.id = id;
    outputs.push_back(v);
  }
  loops.building.erase(key);
  return &(loops.built[key] = std::move(outputs));
}

}  // namespace

std::optional<absl::StatusOr<std::vector<TfValue>>> Converter::ConvertWhileLoopOp(
    Scope* scope, const NodeDef& node) {
  if (while_loops_ == nullptr) while_loops_ = std::make_shared<WhileLoops>();
  WhileLoops& loops = *while_loops_;
  const Body& body = *scope->body;
  auto body_it = loops.bodies.find(&body);
  if (body_it == loops.bodies.end()) {
    body_it = loops.bodies.emplace(&body, AnalyzeFrames(body)).first;
  }
  BodyFrames& frames = body_it->second;
  if (!frames.has_loops) return std::nullopt;
  if (auto bad = frames.invalid.find(node.name()); bad != frames.invalid.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat(DescribeNode(scope, node), ": ", bad->second.why));
  }
  const std::string node_frame = FrameOf(frames, node.name());
  const WhileLoops::LoopScope* loop_scope = FindLoopScope(loops, scope);
  const std::string scope_frame = loop_scope == nullptr ? std::string() : loop_scope->frame;
  if (node_frame != scope_frame) {
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeNode(scope, node), " is in ", DescribeFrame(node_frame), " but is read from ",
        DescribeFrame(scope_frame),
        ": values enter a while loop only through Enter and leave it only through Exit"));
  }
  if (IsExit(node)) {
    const std::string input = DataInput(node);
    const std::string sw = RefNode(input);
    const std::string child = FrameOf(frames, sw);
    if (child.empty() || frames.parent[child] != node_frame) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeNode(scope, node), " does not leave a while loop"));
    }
    auto lf = LoopOf(body, frames, child);
    if (!lf.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(DescribeNode(scope, node), ": ", lf.status().message()));
    }
    auto var = (*lf)->var_of_switch.find(sw);
    if (var == (*lf)->var_of_switch.end() || SplitTopLevelRef(input).second != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeNode(scope, node), " must read output 0 of a Switch on the LoopCond of ",
          DescribeFrame(child), "; it reads '", input, "'"));
    }
    for (const LoopVar& v : (*lf)->vars) {
      if (auto s = CheckControlDependencies(scope, *v.enter); !s.ok()) return s;
    }
    // Each build converts the frame three times (cond0, body, cond1), and a loop nested in
    // another's condition is built in both of its condition scopes: loops nested that way
    // expand exponentially, as functions that call each other do.
    if (!loops.built.count({scope, child})) {
      frames.conversions_left -= 3;
      if (frames.conversions_left < 0) {
        return absl::ResourceExhaustedError(absl::StrCat(
            DescribeNode(scope, node), ": ", DescribeFrame(child), " is built too many times (",
            kMaxFrameConversionsPerNode, " frame conversions per node of the graph at most; ",
            "loops nested in each other's conditions expand exponentially)"));
      }
    }
    auto outputs = BuildLoop(*this, loops, scope, **lf);
    if (!outputs.ok()) return outputs.status();
    return std::vector<TfValue>{(**outputs)[var->second]};
  }
  if (node_frame.empty()) return std::nullopt;  // the top level: converts as usual
  if (IsEnter(node)) {
    if (!IsConstantEnter(node)) {
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeNode(scope, node),
          " enters a loop variable (is_constant=false) but is read by a node other than its "
          "Merge"));
    }
    // A loop invariant: the enclosing frame's value, captured by the Loop body.
    if (auto s = CheckControlDependencies(loop_scope->parent, node); !s.ok()) return s;
    auto v = GetTensor(loop_scope->parent, DataInput(node));
    if (!v.ok()) return v.status();
    TfValue local = *v;
    if (local.id != ir::kNoValue) {
      auto id = ImportValue(scope->frame, local.id, loop_scope->parent->frame);
      if (!id.ok()) return id.status();
      local.id = *id;
    }
    return std::vector<TfValue>{local};
  }
  if (node.op() == "LoopCond") {
    // Inside an iteration that runs, the loop condition is true; its value is its input's.
    auto v = GetTensor(scope, DataInput(node));
    if (!v.ok()) return v.status();
    return std::vector<TfValue>{*v};
  }
  if (IsNextIteration(node)) {
    return absl::InvalidArgumentError(absl::StrCat(
        DescribeNode(scope, node), " is read by a node other than its loop variable's Merge"));
  }
  if (IsMerge(node) || IsSwitch(node)) {
    auto lf = LoopOf(body, frames, node_frame);
    if (lf.ok() &&
        ((*lf)->var_of_merge.count(node.name()) || (*lf)->var_of_switch.count(node.name()))) {
      return absl::InvalidArgumentError(absl::StrCat(
          DescribeNode(scope, node), " carries a variable of ", DescribeFrame(node_frame),
          "; only its Switch (output 0 of the Merge), its Exit (output 0 of the Switch) and the "
          "loop body (output 1 of the Switch) may read it"));
    }
  }
  return std::nullopt;
}

}  // namespace kiln::import::tf
