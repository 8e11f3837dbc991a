#include "ops/linear.h"

#include <algorithm>
#include <array>

#include "ops/targets.h"

namespace fxopt {
namespace {

using namespace targets;

const std::array<LinearDialect, 4>& dialects() {
  static const std::array<LinearDialect, 4> all = {{
      {NodeKind::CallModule, kLinearModule, kTorchNarrow, kFunctionalPad, false},
      {NodeKind::CallModule, kNonDynamicallyQuantizableLinearModule, kTorchNarrow, kFunctionalPad,
       false},
      {NodeKind::CallFunction, kFunctionalLinear, kTorchNarrow, kFunctionalPad, false},
      {NodeKind::CallFunction, kAtenLinear, kAtenSliceTensor, kAtenConstantPadNd, true},
  }};
  return all;
}

bool fail(std::string* why_not, std::string reason) {
  if (why_not) *why_not = std::move(reason);
  return false;
}

const LinearDialect* dialect_of(const Program& program, const Node& node) {
  const ModuleInfo* module =
      node.kind() == NodeKind::CallModule ? program.module(node.target()) : nullptr;
  Symbol type = module ? module->type : node.target();
  for (const LinearDialect& d : dialects())
    if (node.kind() == d.kind && type == d.target) return &d;
  return nullptr;
}

// Only the operands a Linear has: one input for a module; input, weight, bias for a function.
bool plain_call(const Node& node, std::string* why_not) {
  if (node.kind() == NodeKind::CallModule) {
    if (node.args().size() + node.kwargs().items.size() != 1)
      return fail(why_not, "a Linear module takes exactly one input");
    return true;
  }
  if (node.args().size() > 3) return fail(why_not, "too many arguments for a linear");
  for (const auto& [key, value] : node.kwargs().items)
    if (key != "input" && key != "weight" && key != "bias")
      return fail(why_not, "unexpected keyword argument '" + key + "'");
  return true;
}

// in/out features from the weight; the bias and the module's own attributes must agree.
bool read_shapes(const Program& program, LinearView& view, std::string* why_not) {
  if (view.weight.shape.size() != 2) return fail(why_not, "the weight is not a matrix");
  view.out_features = view.weight.shape[0];
  view.in_features = view.weight.shape[1];
  if (view.has_bias()) {
    if (view.bias.shape != std::vector<int64_t>{view.out_features})
      return fail(why_not, "the bias does not match the weight's output features");
    if (view.bias.dtype != view.dtype() || view.bias.device != view.device())
      return fail(why_not, "the bias's dtype or device differs from the weight's");
  }
  if (view.module().empty()) return true;
  const ModuleInfo& module = *program.module(view.node->target());
  const Arg* in = module.attribute("in_features");
  const Arg* out = module.attribute("out_features");
  if (!in || !out || in->integer() != view.in_features || out->integer() != view.out_features)
    return fail(why_not, "in_features / out_features disagree with the weight's shape");
  return true;
}

// The get_attr node a stored operand is read from, or nullptr (module form, absent operand).
Node* read_from(const StoredParams& params, std::string_view name) {
  const StoredParam* param = params.find(name);
  if (!param || !param->tensor || !params.module.empty()) return nullptr;
  return params.node->input(param->index, param->name)->node();
}

}  // namespace

std::string LinearView::owner() const {
  if (!module().empty()) return module();
  std::string path = weight_node->target().str();
  const std::string suffix = ".weight";
  if (path.size() > suffix.size() && path.ends_with(suffix))
    path.resize(path.size() - suffix.size());
  return path;
}

std::string LinearView::short_name() const {
  std::string path = owner();
  return path.substr(path.rfind('.') + 1);  // npos + 1 == 0: the whole path
}

std::string LinearView::scope() const {
  std::string path = owner();
  size_t dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::vector<Trigger> linear_triggers() {
  std::vector<Trigger> triggers;
  for (const LinearDialect& d : dialects()) triggers.push_back({d.kind, d.target});
  return triggers;
}

std::optional<LinearView> as_linear(const Program& program, const Node& node,
                                    std::string* why_not) {
  LinearView view;
  view.node = const_cast<Node*>(&node);
  view.dialect = dialect_of(program, node);
  if (!view.dialect) {
    fail(why_not, "not a Linear");
    return std::nullopt;
  }
  const Arg* input = node.input(kLinearInput, "input");
  view.input = input ? input->node() : nullptr;
  if (!view.input) {
    fail(why_not, "the input is not a tensor produced by the graph");
    return std::nullopt;
  }
  if (!plain_call(node, why_not)) return std::nullopt;
  std::string reason;
  std::optional<StoredParams> params = read_stored_params(
      program, view.node, {{kLinearWeight, "weight"}, {kLinearBias, "bias"}}, &reason);
  if (!params) {
    fail(why_not, reason);
    return std::nullopt;
  }
  view.params = std::move(*params);
  if (!view.params.tensor("weight")) {
    fail(why_not, "it has no weight tensor");
    return std::nullopt;
  }
  view.weight = *view.params.tensor("weight");
  view.weight_node = read_from(view.params, "weight");
  view.bias_node = read_from(view.params, "bias");
  if (const TensorInfo* bias = view.params.tensor("bias")) view.bias = *bias;
  if (!read_shapes(program, view, why_not)) return std::nullopt;
  return view;
}

bool same_kind(const LinearView& a, const LinearView& b) { return a.dialect == b.dialect; }

bool owns_tensors(const Program& program, const LinearView& view, std::string* why_not) {
  const Graph& graph = program.graph;
  if (!view.module().empty()) {
    size_t calls = graph.find(NodeKind::CallModule, view.node->target()).size();
    if (calls > 1)
      return fail(why_not, "module '" + view.module() + "' is called at " + std::to_string(calls) +
                               " places");
    return true;
  }
  for (Node* stored : {view.weight_node, view.bias_node}) {
    if (!stored) continue;
    bool alone =
        stored->users().size() == 1 && graph.find(NodeKind::GetAttr, stored->target()).size() == 1;
    if (!alone)
      return fail(why_not, "tensor '" + stored->target().str() + "' is also read elsewhere");
  }
  return true;
}

std::optional<std::vector<LinearView>> call_sites(const Program& program, const LinearView& view,
                                                  std::string* why_not) {
  const Graph& graph = program.graph;
  std::vector<std::pair<Node*, std::string>> nodes;  // each reader, and what it reads
  if (!view.module().empty()) {
    for (Node* call : graph.find(NodeKind::CallModule, view.node->target()))
      nodes.emplace_back(call, "module '" + view.module() + "'");
  } else {
    for (Node* stored : {view.weight_node, view.bias_node}) {
      if (!stored) continue;
      for (Node* read : graph.find(NodeKind::GetAttr, stored->target()))
        for (Node* user : read->users())
          if (std::ranges::find(nodes, user, &std::pair<Node*, std::string>::first) == nodes.end())
            nodes.emplace_back(user, "tensor '" + stored->target().str() + "'");
    }
    std::ranges::sort(nodes,
                      [&](const auto& a, const auto& b) { return graph.before(a.first, b.first); });
  }
  auto path = [](const Node* read) { return read ? read->target() : Symbol(); };
  std::vector<LinearView> sites;
  for (const auto& [node, what] : nodes) {
    std::optional<LinearView> site = as_linear(program, *node);
    bool same =
        site && (view.module().empty() ? path(site->weight_node) == path(view.weight_node) &&
                                             path(site->bias_node) == path(view.bias_node)
                                       : site->module() == view.module());
    if (!same) {
      fail(why_not, what + " is also read elsewhere");
      return std::nullopt;
    }
    sites.push_back(std::move(*site));
  }
  return sites;
}

}  // namespace fxopt
