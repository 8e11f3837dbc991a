#include "ops/decomposed_linear.h"

#include <algorithm>

#include "ops/cast.h"
#include "ops/targets.h"

namespace fxopt {
namespace {

using namespace targets;

Trigger function(const char* target) { return {NodeKind::CallFunction, Symbol::intern(target)}; }
Trigger method(const char* target) { return {NodeKind::CallMethod, Symbol::intern(target)}; }

bool is_one_of(const Node& node, const std::vector<Trigger>& forms) {
  return std::any_of(forms.begin(), forms.end(),
                     [&](const Trigger& t) { return node.is(t.kind, t.target); });
}

bool fail(std::string* why_not, std::string reason) {
  if (why_not) *why_not = std::move(reason);
  return false;
}

bool is_addmm(const Node& node) {
  return node.is(NodeKind::CallFunction, kTorchAddmm) ||
         node.is(NodeKind::CallFunction, kAtenAddmm) || node.is(NodeKind::CallMethod, kMethodAddmm);
}

// A dimension operand normalised for a 2-D tensor, or -1.
int64_t dim_of(const Arg& arg) {
  std::optional<int64_t> d = arg.integer();
  if (!d || *d < -2 || *d > 1) return -1;
  return *d < 0 ? *d + 2 : *d;
}

// The operand `node` transposes if it is a transposition of a matrix: t / T / numpy_T, a
// transpose of dims {0, 1} or a permute (1, 0); else nullptr.
Node* transposed(const Node& node) {
  static const std::vector<Trigger> t_forms = {method("t"), function("torch.t"),
                                               function("aten.t.default"),
                                               function("aten.numpy_T.default")};
  static const std::vector<Trigger> transpose_forms = {
      method("transpose"), function("torch.transpose"), function("aten.transpose.int")};
  static const std::vector<Trigger> permute_forms = {method("permute"), function("torch.permute"),
                                                     function("aten.permute.default")};
  const Args& args = node.args();
  if (args.empty() || !node.kwargs().items.empty()) return nullptr;
  Node* source = args[0].node();
  bool swap = false;
  if (is_one_of(node, t_forms)) {
    swap = args.size() == 1;
  } else if (node.is(NodeKind::CallFunction, Symbol::intern("getattr"))) {  // W.T, W.mT
    swap = args.size() == 2 && (args[1] == Arg("T") || args[1] == Arg("mT"));
  } else if (is_one_of(node, transpose_forms)) {
    swap = args.size() == 3 && dim_of(args[1]) >= 0 && dim_of(args[2]) >= 0 &&
           dim_of(args[1]) != dim_of(args[2]);
  } else if (is_one_of(node, permute_forms)) {
    // permute(1, 0) as a method; permute((1, 0)) / permute([1, 0]) in every form.
    std::vector<Arg> dims(args.begin() + 1, args.end());
    if (dims.size() == 1 && dims[0].sequence()) dims = *dims[0].sequence();
    swap = dims.size() == 2 && dim_of(dims[0]) == 1 && dim_of(dims[1]) == 0;
  }
  return swap ? source : nullptr;
}

// The stored tensor read by `node` (a get_attr), or nullptr.
const TensorInfo* stored(const Program& program, const Node* node) {
  if (!node || node->kind() != NodeKind::GetAttr) return nullptr;
  return program.attribute(node->target());
}

bool is_bias_for(const TensorInfo* bias, const DecomposedLinear& view) {
  return bias && bias->shape == std::vector<int64_t>{view.out_features} &&
         bias->dtype == view.stored_weight.dtype && bias->device == view.stored_weight.device;
}

// The add reading `product` and a stored bias, if it is the product's only reader.
void find_bias_add(const Program& program, DecomposedLinear& view) {
  static const std::vector<Trigger> add_forms = {function("_operator.add"), function("torch.add"),
                                                 method("add"), function("aten.add.Tensor")};
  if (view.product->users().size() != 1) return;
  Node* add = view.product->users().front();
  if (!is_one_of(*add, add_forms) || add->args().size() != 2 || !add->kwargs().items.empty())
    return;
  const Args& args = add->args();
  Node* other = args[0].node() == view.product ? args[1].node() : args[0].node();
  if (other == view.product || !is_bias_for(stored(program, other), view)) return;
  view.bias_add = add;
  view.bias_read = other;
  view.bias = *stored(program, other);
}

// addmm's beta and alpha, where passed, must be 1.
bool unscaled(const Node& node) {
  if (node.args().size() != 3) return false;
  for (const auto& [key, value] : node.kwargs().items)
    if ((key != "beta" && key != "alpha") || value.number() != 1.0) return false;
  return true;
}

}  // namespace

std::vector<Trigger> decomposed_linear_triggers() {
  return {{NodeKind::CallFunction, kTorchAddmm}, {NodeKind::CallFunction, kAtenAddmm},
          {NodeKind::CallMethod, kMethodAddmm},  function("torch.mm"),
          function("aten.mm.default"),           method("mm"),
          function("_operator.matmul"),          function("torch.matmul"),
          function("aten.matmul.default"),       method("matmul")};
}

std::optional<DecomposedLinear> as_decomposed_linear(const Program& program, const Node& node,
                                                     std::string* why_not) {
  DecomposedLinear view;
  view.product = const_cast<Node*>(&node);
  view.aten = is_aten_call(node);
  bool addmm = is_addmm(node);
  if (!is_one_of(node, decomposed_linear_triggers())) {
    fail(why_not, "not a matrix product");
    return std::nullopt;
  }
  if (addmm ? !unscaled(node) : node.args().size() != 2 || !node.kwargs().items.empty()) {
    fail(why_not, addmm ? "its operands are not (bias, input, weight) with beta = alpha = 1"
                        : "its operands are not two positional tensors");
    return std::nullopt;
  }
  size_t first = addmm ? 1 : 0;
  view.input = node.args()[first].node();
  Node* right = node.args()[first + 1].node();
  if (!view.input || !right) {
    fail(why_not, "its operands are not tensors produced by the graph");
    return std::nullopt;
  }
  if (stored(program, right)) {
    view.weight_read = right;
  } else if (Node* source = transposed(*right); stored(program, source)) {
    view.weight_read = source;
    view.transpose = right;
  } else {
    fail(why_not,
         "its second operand is not a stored weight (a get_attr tensor, or one transposed)");
    return std::nullopt;
  }
  view.stored_weight = *stored(program, view.weight_read);
  if (view.stored_weight.shape.size() != 2) {
    fail(why_not, "its weight is not a matrix");
    return std::nullopt;
  }
  bool swapped = view.transpose != nullptr;
  view.in_features = view.stored_weight.shape[swapped ? 1 : 0];
  view.out_features = view.stored_weight.shape[swapped ? 0 : 1];
  if (std::optional<int> rank = view.input->rank(); rank && *rank == 0) {
    fail(why_not, "its input is a scalar");
    return std::nullopt;
  }
  if (!addmm) {
    find_bias_add(program, view);
    return view;
  }
  Node* bias = node.args()[0].node();
  if (!is_bias_for(stored(program, bias), view)) {
    fail(why_not, "its bias is not a stored 1-D tensor of out_features elements like the weight");
    return std::nullopt;
  }
  view.bias_read = bias;
  view.bias = *stored(program, bias);
  return view;
}

}  // namespace fxopt
