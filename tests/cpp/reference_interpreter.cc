#include "reference_interpreter.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace fxopt::testing {
namespace {

TensorInfo as_tensor(ReferenceTensorOps& ops, const Value& v, const TensorInfo& like) {
  if (auto* t = std::get_if<TensorInfo>(&v)) return *t;
  return ops.full({}, std::get<double>(v), like);
}

// Binary elementwise kernel over a tensor and a tensor-or-scalar; for the commutative ones
// (not `invert`) the scalar may come first (`0.5 * x`).
ReferenceInterpreter::Kernel binary(TensorInfo (ReferenceTensorOps::*op)(const TensorInfo&,
                                                                         const TensorInfo&),
                                    bool invert = false) {
  return [=](ReferenceInterpreter& in, const Node&, const std::vector<Value>& args) -> Value {
    bool swap = !invert && std::holds_alternative<double>(args.at(0));
    const TensorInfo& a = std::get<TensorInfo>(args.at(swap ? 1 : 0));
    Value b = args.at(swap ? 0 : 1);
    if (invert && std::holds_alternative<double>(b)) b = 1.0 / std::get<double>(b);
    TensorInfo other = as_tensor(in.ops(), b, a);
    if (invert && std::holds_alternative<TensorInfo>(b)) {  // a / b as a * (1 / b)
      std::vector<double> inverse = in.ops().values(other);
      for (double& v : inverse) v = 1.0 / v;
      other = in.ops().make(other.shape, std::move(inverse), other.dtype);
    }
    return (in.ops().*op)(a, other);
  };
}

}  // namespace

ReferenceInterpreter::ReferenceInterpreter(const Program& program, ReferenceTensorOps& ops)
    : program_(program), ops_(ops) {
  auto f = [](const char* t) { return std::pair(NodeKind::CallFunction, std::string(t)); };
  auto m = [](const char* t) { return std::pair(NodeKind::CallMethod, std::string(t)); };
  Kernel mul = binary(&ReferenceTensorOps::mul);
  Kernel div = binary(&ReferenceTensorOps::mul, /*invert=*/true);
  Kernel add = binary(&ReferenceTensorOps::add);
  for (auto key : {f("_operator.mul"), f("torch.mul"), m("mul"), m("mul_"), f("aten.mul.Tensor"),
                   f("aten.mul.Scalar")})
    kernels_[key] = mul;
  for (auto key : {f("_operator.truediv"), f("torch.div"), f("torch.true_divide"), m("div"),
                   m("div_"), m("true_divide"), f("aten.div.Tensor"), f("aten.div.Scalar")})
    kernels_[key] = div;
  for (auto key : {f("_operator.add"), f("_operator.iadd"), f("torch.add"), f("aten.add.Tensor")})
    kernels_[key] = add;
  add_linear_kernels(*this);
  add_conv_kernels(*this);
  add_activation_kernels(*this);
  add_int8_kernels(*this);
}

TensorInfo ReferenceInterpreter::read_attribute(const std::string& path) const {
  if (const TensorInfo* t = program_.attribute(Symbol::intern(path))) return *t;
  // A module's own tensor ("fc.weight"), as fx's get_attr resolves it.
  size_t dot = path.rfind('.');
  const ModuleInfo* module =
      dot == std::string::npos ? nullptr : program_.module(Symbol::intern(path.substr(0, dot)));
  const TensorInfo* t = module ? module->tensor(path.substr(dot + 1)) : nullptr;
  if (!t) throw std::invalid_argument("reference interpreter: no tensor at '" + path + "'");
  return *t;
}

Value ReferenceInterpreter::evaluate(const Arg& arg, const std::map<const Node*, Value>& env) {
  if (Node* n = arg.node()) return env.at(n);
  if (auto v = arg.number()) return *v;
  bool has_node = false;
  arg.for_each_node([&](Node*) { has_node = true; });
  if (!has_node) return std::monostate{};
  throw std::invalid_argument("reference interpreter cannot evaluate " + to_string(arg));
}

std::vector<TensorInfo> ReferenceInterpreter::run(const std::map<std::string, TensorInfo>& inputs) {
  std::map<const Node*, Value> env;
  for (const Node* node : program_.graph) {
    switch (node->kind()) {
      case NodeKind::Placeholder:
        env[node] = inputs.at(node->target().str());
        break;
      case NodeKind::GetAttr:
        env[node] = read_attribute(node->target().str());
        break;
      case NodeKind::Output: {
        std::vector<TensorInfo> outputs;
        node->args().at(0).for_each_node(
            [&](Node* n) { outputs.push_back(std::get<TensorInfo>(env.at(n))); });
        return outputs;
      }
      default:
        env[node] = call(*node, env);
    }
  }
  throw std::invalid_argument("graph has no output node");
}

Value ReferenceInterpreter::call(const Node& node, const std::map<const Node*, Value>& env) {
  const ModuleInfo* module =
      node.kind() == NodeKind::CallModule ? program_.module(node.target()) : nullptr;
  auto it = kernels_.find({node.kind(), module ? module->type.str() : node.target().str()});
  if (it == kernels_.end())
    throw std::invalid_argument("reference interpreter has no kernel for " + node.describe());
  std::vector<Value> args;
  for (const Arg& a : node.args()) args.push_back(evaluate(a, env));
  for (const auto& [key, a] : node.kwargs().items)
    if (key == "other" || key == "input" || key == "weight" || key == "bias" || key == "attn_mask")
      args.push_back(evaluate(a, env));
  return it->second(*this, node, args);
}

double max_abs_diff(ReferenceTensorOps& ops, const TensorInfo& a, const TensorInfo& b) {
  if (a.shape != b.shape) return std::numeric_limits<double>::infinity();
  const auto &va = ops.values(a), &vb = ops.values(b);
  double worst = 0;
  for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, std::abs(va[i] - vb[i]));
  return worst;
}

}  // namespace fxopt::testing
