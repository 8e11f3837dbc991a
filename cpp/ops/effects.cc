#include "ops/effects.h"

#include <algorithm>
#include <unordered_map>

#include "ops/attention.h"
#include "ops/targets.h"

namespace fxopt {
namespace {

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool is_aten(std::string_view target) {
  return target.starts_with("aten.") || target.starts_with("prims.");
}

// The overload of an ATen target ("out" for aten.add.out); empty otherwise.
std::string_view aten_overload(const Node& node) {
  std::string_view target = node.target().str();
  if (node.kind() != NodeKind::CallFunction || !is_aten(target)) return {};
  size_t last = target.rfind('.');
  size_t first = target.find('.');
  return last == first ? std::string_view() : target.substr(last + 1);
}

std::string_view module_type(const Program& program, const Node& node) {
  const ModuleInfo* module = program.module(node.target());
  return module ? std::string_view(module->type.str()) : std::string_view();
}

std::string_view last_component(std::string_view name) {
  size_t dot = name.rfind('.');
  return dot == std::string_view::npos ? name : name.substr(dot + 1);
}

bool attribute_is(const Program& program, const Node& node, std::string_view name, bool value) {
  const ModuleInfo* module = program.module(node.target());
  const Arg* a = module ? module->attribute(name) : nullptr;
  return a && *a == Arg(value);
}

// x.add_(y), torch.relu_, aten.add_.Tensor: a trailing underscore that is not a dunder's.
bool in_place_name(std::string_view name) {
  if (name.ends_with("__")) {
    // __iadd__, __iand__, ...: Python's in-place operators; __setitem__ writes too.
    return (name.starts_with("__i") && !name.starts_with("__index") &&
            !name.starts_with("__invert")) ||
           name == "__setitem__";
  }
  return name.ends_with('_');
}

// Module types (torch.nn.modules.<file>.<Class>) whose call only computes its value, given the
// checks in side_effect (training mode, inplace).
bool pure_module_type(std::string_view type) {
  constexpr std::string_view kPrefix = "torch.nn.modules.";
  if (!type.starts_with(kPrefix)) return false;
  std::string_view rest = type.substr(kPrefix.size());
  std::string_view file = rest.substr(0, rest.find('.'));
  return one_of(file, {"linear", "conv", "batchnorm", "instancenorm", "normalization", "activation",
                       "dropout", "sparse", "pooling", "flatten", "padding", "pixelshuffle",
                       "upsampling", "distance", "channelshuffle", "fold"});
}

bool random_name(std::string_view name) {
  while (name.ends_with('_') && !name.ends_with("__")) name.remove_suffix(1);
  while (name.starts_with('_')) name.remove_prefix(1);
  return one_of(name, {"rand",
                       "randn",
                       "randint",
                       "randperm",
                       "rand_like",
                       "randn_like",
                       "randint_like",
                       "bernoulli",
                       "normal",
                       "uniform",
                       "multinomial",
                       "poisson",
                       "exponential",
                       "geometric",
                       "cauchy",
                       "log_normal",
                       "random",
                       "binomial",
                       "standard_gamma",
                       "sample_dirichlet",
                       "dropout",
                       "dropout1d",
                       "dropout2d",
                       "dropout3d",
                       "alpha_dropout",
                       "feature_dropout",
                       "feature_alpha_dropout",
                       "native_dropout",
                       "fused_dropout",
                       "rrelu",
                       "rrelu_with_noise",
                       "gumbel_softmax",
                       "Dropout",
                       "Dropout1d",
                       "Dropout2d",
                       "Dropout3d",
                       "AlphaDropout",
                       "FeatureAlphaDropout",
                       "RReLU"});
}

// Calls whose purpose is an effect on the interpreter, not a value.
bool effect_function(std::string_view target) {
  return one_of(target, {"print", "builtins.print", "torch._C._set_grad_enabled",
                         "torch.set_grad_enabled", "torch.manual_seed", "torch.random.manual_seed",
                         "torch.amp.autocast_mode._enter_autocast",
                         "torch.amp.autocast_mode._exit_autocast", "_operator.setitem",
                         "torch.autograd.grad_mode._enter_inference_mode",
                         "torch.autograd.grad_mode._exit_inference_mode"}) ||
         target.starts_with("profiler.") || target.starts_with("torch.ops.profiler.") ||
         target.starts_with("torch.autograd.profiler.");
}

}  // namespace

bool fresh_result(const Program& program, const Node& node) {
  if (node.kind() == NodeKind::CallModule) {
    std::string_view type = last_component(module_type(program, node));
    return !type.empty() && !one_of(type, {"Identity", "Dropout", "Flatten", "Unflatten"});
  }
  std::string_view name = op_name(program, node);
  return one_of(name, {"add",
                       "sub",
                       "mul",
                       "div",
                       "truediv",
                       "floordiv",
                       "mod",
                       "pow",
                       "neg",
                       "matmul",
                       "mm",
                       "bmm",
                       "addmm",
                       "baddbmm",
                       "linear",
                       "conv1d",
                       "conv2d",
                       "conv3d",
                       "convolution",
                       "softmax",
                       "_softmax",
                       "log_softmax",
                       "layer_norm",
                       "batch_norm",
                       "group_norm",
                       "embedding",
                       "cat",
                       "stack",
                       "clone",
                       "_to_copy",
                       "where",
                       "sum",
                       "mean",
                       "gelu",
                       "relu",
                       "silu",
                       "sigmoid",
                       "tanh",
                       "exp",
                       "log",
                       "sqrt",
                       "rsqrt",
                       "eq",
                       "ne",
                       "lt",
                       "le",
                       "gt",
                       "ge",
                       "masked_fill",
                       "scaled_dot_product_attention",
                       "arange",
                       "zeros",
                       "ones",
                       "full",
                       "empty",
                       "zeros_like",
                       "ones_like",
                       "full_like",
                       "new_ones",
                       "new_zeros",
                       "new_full",
                       "new_empty",
                       "lift_fresh_copy",
                       "int8_conv2d"});
}

namespace {

Node* first_operand(const Node& node) {
  return node.args().empty() ? nullptr : node.args()[0].node();
}

}  // namespace

std::string_view op_name(const Program& program, const Node& node) {
  std::string_view target = node.target().str();
  switch (node.kind()) {
    case NodeKind::CallMethod:
      return target;
    case NodeKind::CallModule:
      return last_component(module_type(program, node));
    case NodeKind::CallFunction:
      if (is_aten(target)) {
        size_t first = target.find('.');
        size_t second = target.find('.', first + 1);
        return target.substr(first + 1,
                             second == std::string_view::npos ? second : second - first - 1);
      }
      return last_component(target);
    default:
      return {};
  }
}

bool is_mutating(const Program& program, const Node& node) {
  switch (node.kind()) {
    case NodeKind::CallModule:
      return attribute_is(program, node, "inplace", true);
    case NodeKind::CallMethod:
    case NodeKind::CallFunction: {
      std::string_view name = op_name(program, node);
      if (in_place_name(name)) return true;
      std::string_view target = node.target().str();
      if (target.starts_with("_operator.i") &&
          one_of(name, {"iadd", "iand", "iconcat", "ifloordiv", "ilshift", "imod", "imul",
                        "imatmul", "ior", "ipow", "irshift", "isub", "itruediv", "ixor"}))
        return true;
      if (target == "_operator.setitem") return true;
      // fxopt's int8 convolution adds into its residual where the graph lets it
      // (passes/quantize_convs_int8.h).
      if (node.target() == targets::kInt8Conv2d)
        return node.args().size() > targets::kInt8Conv2dResidualDies &&
               node.args()[targets::kInt8Conv2dResidualDies] == Arg(true);
      std::string_view overload = aten_overload(node);
      if (overload == "out" || overload.ends_with("_out")) return true;
      const Arg* inplace = node.kwargs().find("inplace");
      return inplace && *inplace == Arg(true);
    }
    default:
      return false;
  }
}

bool is_random(const Program& program, const Node& node) {
  if (std::optional<Dropout> dropout = as_dropout(program, node)) return !dropout->identity;
  if (node.kind() == NodeKind::CallModule)
    return random_name(op_name(program, node)) && !attribute_is(program, node, "training", false);
  return (node.kind() == NodeKind::CallFunction || node.kind() == NodeKind::CallMethod) &&
         random_name(op_name(program, node));
}

std::vector<Trigger> runtime_check_triggers() {
  std::vector<Trigger> triggers;
  for (const char* f :
       {"aten._assert_async.msg", "aten._assert_async.default", "aten._assert_scalar.default",
        "aten._assert_tensor_metadata.default", "aten.sym_constrain_range.default",
        "aten.sym_constrain_range_for_size.default", "torch._assert", "torch._assert_async",
        "torch._check", "torch._check_is_size", "torch._check_with", "torch._check_value",
        "torch._check_type", "torch._check_index", "torch._check_not_implemented"})
    triggers.push_back({NodeKind::CallFunction, Symbol::intern(f)});
  triggers.push_back({NodeKind::CallModule, Symbol::intern("torch.export._unlift.GuardsFn")});
  return triggers;
}

bool is_runtime_check(const Program& program, const Node& node) {
  static const std::vector<Trigger> triggers = runtime_check_triggers();
  return matches_trigger(program, node, triggers);
}

std::string_view side_effect(const Program& program, const Node& node) {
  switch (node.kind()) {
    case NodeKind::Placeholder:
      return "is a graph input";
    case NodeKind::Output:
      return "is the graph's output";
    case NodeKind::GetAttr:
      return {};
    default:
      break;
  }
  if (is_runtime_check(program, node)) return "is a runtime check";
  if (is_mutating(program, node)) return "modifies a value in place";
  if (is_random(program, node)) return "draws random numbers";
  if (node.kind() == NodeKind::CallModule) {
    if (!pure_module_type(module_type(program, node)))
      return "calls a module fxopt does not know to be pure";
    std::string_view type = op_name(program, node);
    if (type.starts_with("BatchNorm") && !attribute_is(program, node, "training", false))
      return "updates running statistics (batch norm in training mode)";
    return {};
  }
  if (node.kind() == NodeKind::CallFunction && effect_function(node.target().str()))
    return "changes interpreter state or prints";
  if (node.kind() == NodeKind::CallMethod &&
      one_of(node.target().str(), {"backward", "register_hook", "retain_grad", "record_stream"}))
    return "has an autograd or stream side effect";
  return {};
}

std::unordered_set<const Node*> written_in_place(const Program& program) {
  // Values linked by "may alias its first operand" edges form trees; a write to any member may
  // show in every member, so whole trees are marked. Roots are memoised: O(n).
  std::unordered_map<const Node*, const Node*> root;
  auto root_of = [&](const Node* node) {
    const Node* r = node;
    while (true) {
      auto it = root.find(r);
      if (it != root.end()) {
        r = it->second;
        break;
      }
      Node* parent = fresh_result(program, *r) ? nullptr : first_operand(*r);
      if (!parent) break;
      r = parent;
    }
    return r;
  };
  std::unordered_set<const Node*> written_roots;
  for (const Node* node : program.graph) {
    root[node] = root_of(node);
    if (!is_mutating(program, *node)) continue;
    written_roots.insert(root[node]);
    auto add = [&](Node* operand) { written_roots.insert(root_of(operand)); };
    node->for_each_input(add);
  }
  std::unordered_set<const Node*> written;
  if (written_roots.empty()) return written;
  for (const Node* node : program.graph)
    if (written_roots.contains(root[node])) written.insert(node);
  return written;
}

}  // namespace fxopt
