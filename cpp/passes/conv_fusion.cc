#include "passes/conv_fusion.h"

#include <algorithm>

#include "ops/attention.h"

namespace fxopt {
namespace {

bool is_in_place_add(const Node& node) {
  static const Symbol iadd = Symbol::intern("_operator.iadd");
  static const Symbol aten = Symbol::intern("aten.add_.Tensor");
  static const Symbol method = Symbol::intern("add_");
  return node.is(NodeKind::CallFunction, iadd) || node.is(NodeKind::CallFunction, aten) ||
         node.is(NodeKind::CallMethod, method);
}

std::optional<ResidualAdd> residual_add(Node* conv) {
  if (conv->users().size() != 1) return std::nullopt;
  Node* user = conv->users().front();
  Node* other = nullptr;
  if (std::optional<TensorPair> add = as_tensor_add(*user))
    other = add->a == conv ? add->b : add->a;
  else if (is_in_place_add(*user) && user->args().size() == 2 && user->kwargs().items.empty() &&
           user->args()[0].node() == conv)
    other = user->args()[1].node();  // conv += r writes conv's value only
  if (!other || other == conv) return std::nullopt;
  // Equal named sizes are equal at run time (Node::shape); -1 names none.
  bool named = std::ranges::none_of(conv->shape(), [](int64_t d) { return d == -1; });
  if (!named || other->shape() != conv->shape() || other->dtype() != conv->dtype())
    return std::nullopt;
  return ResidualAdd{user, other};
}

}  // namespace

std::vector<int64_t> ConvFusion::choice_shape() const {
  // An unbatched input runs as a batch of one; unknown sizes (a symbolic trace records none)
  // leave the choice to the static fallback.
  std::vector<int64_t> in = conv.input->shape();
  if (in.size() == 3) in.insert(in.begin(), 1);
  if (in.empty()) in.assign(4, -1);
  const TensorInfo& w = conv.weight();
  std::vector<int64_t> shape = {in[0], in[1], in[2], in[3], w.dim(0), w.dim(2), w.dim(3)};
  for (const std::vector<int64_t>* v : {&geometry.stride, &geometry.padding, &geometry.dilation})
    shape.insert(shape.end(), v->begin(), v->end());
  shape.push_back(conv.groups);
  return shape;
}

std::string ConvFusion::choice_variant() const {
  return std::string(activation ? activation->name : "none") + (add ? ",add" : "") +
         (conv.params.tensor("bias") ? "" : ",no_bias");
}

std::vector<Node*> ConvFusion::pattern() const {
  std::vector<Node*> nodes = {conv.params.node};
  if (add) nodes.push_back(add->node);
  if (activation) nodes.push_back(activation->node);
  return nodes;
}

std::vector<Node*> ConvFusion::inputs() const {
  std::vector<Node*> nodes = {conv.input};
  if (add) nodes.push_back(add->residual);
  return nodes;
}

bool is_pointwise(const ConvFusion& fusion) {
  const TensorInfo& weight = fusion.conv.weight();
  auto all = [](const std::vector<int64_t>& values, int64_t value) {
    return std::ranges::all_of(values, [value](int64_t v) { return v == value; });
  };
  const ConvGeometry& g = fusion.geometry;
  return fusion.conv.groups == 1 && weight.dim(2) == 1 && weight.dim(3) == 1 && all(g.stride, 1) &&
         all(g.padding, 0) && all(g.dilation, 1);
}

bool is_depthwise(const ConvFusion& fusion) {
  const TensorInfo& weight = fusion.conv.weight();
  const std::vector<int64_t>& in = fusion.conv.input->shape();
  int64_t channels = in.empty() ? -1 : in[in.size() - 3];
  return weight.dim(1) == 1 && weight.dim(0) == fusion.conv.groups &&
         channels == fusion.conv.groups;
}

void ConvFusion::unfuse() {
  add.reset();
  activation.reset();
}

std::optional<ConvFusion> conv_fusion(const Program& program, Node* node, std::string* why_not) {
  std::optional<Conv> conv = as_conv(program, node, why_not);
  if (!conv) return std::nullopt;
  if (conv->spatial_dims != 2 || conv->transposed) {
    *why_not = "oneDNN's fused convolution here takes 2-D, not transposed, ones";
    return std::nullopt;
  }
  std::optional<ConvGeometry> geometry = conv_geometry(program, *conv, why_not);
  if (!geometry) return std::nullopt;
  size_t rank = conv->input->shape().size();
  if (rank != 0 && rank != 3 && rank != 4) {
    *why_not = "its input is neither 3-D nor 4-D";
    return std::nullopt;
  }
  ConvFusion fusion{std::move(*conv), std::move(*geometry), residual_add(node), std::nullopt};
  fusion.activation = fusable_activation(program, fusion.add ? fusion.add->node : node);
  if (fusion.add && fusion.activation && fusion.activation->name != "relu")
    fusion.activation.reset();
  return fusion;
}

}  // namespace fxopt
