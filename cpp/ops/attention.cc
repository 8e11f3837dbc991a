#include "ops/attention.h"

#include <algorithm>
#include <initializer_list>

#include "ops/cast.h"
#include "ops/spelling.h"

namespace fxopt {
namespace {

bool is_module(const Program& program, const Node& node, const char* type) {
  if (node.kind() != NodeKind::CallModule) return false;
  const ModuleInfo* module = program.module(node.target());
  return module && module->type.str() == type;
}

std::optional<int> rank_of(const Node& node, const Node& input) {
  return node.rank() ? node.rank() : input.rank();
}

// Whether `dims` (as written, possibly negative) are the last two of a value of rank `rank`.
bool last_two(int64_t d0, int64_t d1, std::optional<int> rank) {
  if (d0 > d1) std::swap(d0, d1);
  if (!rank) return d0 == -2 && d1 == -1;
  auto normal = [&](int64_t d) { return d < 0 ? d + *rank : d; };
  return *rank >= 2 &&
         std::minmax(normal(d0), normal(d1)) == std::minmax(int64_t(*rank - 2), int64_t(*rank - 1));
}

// The dims a permute passes: x.permute(0, 1, 3, 2), x.permute([0, 1, 3, 2]), permute(x, dims).
std::optional<std::vector<int64_t>> permutation(const Node& node) {
  std::vector<Arg> items;
  if (const Arg* dims = node.kwargs().find("dims")) {
    if (!dims->sequence()) return std::nullopt;
    items = *dims->sequence();
  } else if (node.args().size() == 2 && node.args()[1].sequence()) {
    items = *node.args()[1].sequence();
  } else {
    items.assign(node.args().begin() + 1, node.args().end());
  }
  std::vector<int64_t> dims;
  for (const Arg& item : items) {
    std::optional<int64_t> d = item.integer();
    if (!d) return std::nullopt;
    dims.push_back(*d);
  }
  return dims;
}

bool swaps_last_two(const std::vector<int64_t>& dims) {
  int64_t n = int64_t(dims.size());
  if (n < 2) return false;
  for (int64_t i = 0; i < n; ++i) {
    int64_t want = i < n - 2 ? i : (i == n - 2 ? n - 1 : n - 2);
    if ((dims[i] < 0 ? dims[i] + n : dims[i]) != want) return false;
  }
  return true;
}

}  // namespace

Node* last_two_transposed(const Node& node) {
  Node* input = node_input(node, 0, "input");
  if (!input) return nullptr;
  if (is_method(node, {"transpose"}) ||
      is_function(node, {"torch.transpose", "aten.transpose.int"})) {
    const Arg* d0 = node.input(1, "dim0");
    const Arg* d1 = node.input(2, "dim1");
    if (!d0 || !d1 || !d0->integer() || !d1->integer()) return nullptr;
    return last_two(*d0->integer(), *d1->integer(), rank_of(node, *input)) ? input : nullptr;
  }
  if (is_method(node, {"permute"}) ||
      is_function(node, {"torch.permute", "aten.permute.default"})) {
    std::optional<std::vector<int64_t>> dims = permutation(node);
    return dims && swaps_last_two(*dims) ? input : nullptr;
  }
  return nullptr;
}

std::optional<MaskFill> as_mask_fill(const Node& node, std::string* why_not) {
  MaskFill fill;
  const Arg* value = nullptr;
  if (is_method(node, {"masked_fill", "masked_fill_"}) ||
      is_function(node, {"torch.masked_fill", "aten.masked_fill.Scalar"})) {
    fill.scores = node_input(node, 0, "input");
    fill.condition = node_input(node, 1, "mask");
    value = node.input(2, "value");
  } else if (is_function(node, {"torch.where", "aten.where.ScalarOther", "aten.where.ScalarSelf",
                                "aten.where.self"})) {
    fill.condition = node_input(node, 0, "condition");
    const Arg* self = node.input(1, "input");
    const Arg* other = node.input(2, "other");
    if (!self || !other) return std::nullopt;
    fill.fill_where = !self->node();  // where(c, v, x) fills where c holds
    fill.scores = fill.fill_where ? other->node() : self->node();
    value = fill.fill_where ? self : other;
  } else {
    return std::nullopt;
  }
  if (!fill.scores || !fill.condition || !value) return std::nullopt;
  if (!value->is_number()) {
    *why_not = "'" + node.name() + "' fills with a tensor, not a constant number";
    return std::nullopt;
  }
  fill.fill = *value->number();
  return fill;
}

std::optional<Node*> as_last_dim_softmax(const Program& program, const Node& node,
                                         std::string* why_not) {
  const Arg* dim = nullptr;
  if (is_module(program, node, "torch.nn.modules.activation.Softmax"))
    dim = program.module(node.target())->attribute("dim");
  else if (is_function(node, {"torch.nn.functional.softmax", "torch.softmax", "aten.softmax.int",
                              "aten._softmax.default"}) ||
           is_method(node, {"softmax"}))
    dim = node.input(1, "dim");
  else
    return std::nullopt;
  Node* input = node_input(node, 0, "input");
  if (!input) return std::nullopt;
  std::optional<int64_t> d = dim ? dim->integer() : std::nullopt;
  if (!d) {
    *why_not = "the softmax '" + node.name() + "' has no explicit dim";
    return std::nullopt;
  }
  std::optional<int> rank = rank_of(node, *input);
  if (*d == -1 || (rank && *d == *rank - 1)) return input;
  *why_not = "the softmax '" + node.name() + "' normalizes dim " + std::to_string(*d) +
             (rank ? ", not the last one" : " of a value of unknown rank, not dim -1");
  return std::nullopt;
}

std::optional<Dropout> as_dropout(const Program& program, const Node& node) {
  bool training = true;
  double p = 0.5;
  if (is_module(program, node, "torch.nn.modules.dropout.Dropout")) {
    const Arg* t = program.module(node.target())->attribute("training");
    training = !t || *t != Arg(false);
  } else if (is_function(
                 node, {"torch.nn.functional.dropout", "torch.dropout", "aten.dropout.default"})) {
    bool functional = node.target().str() == "torch.nn.functional.dropout";
    const Arg* pa = node.input(1, "p");
    const Arg* ta = node.input(2, functional ? "training" : "train");
    if (pa) p = pa->number().value_or(0.5);
    training = !ta || *ta != Arg(false);  // F.dropout trains by default
  } else {
    return std::nullopt;
  }
  Node* input = node_input(node, 0, "input");
  if (!input) return std::nullopt;
  return Dropout{input, !training || p == 0.0};
}

Node* cast_input(const Node& node) {
  if (Node* source = cast_source(node)) return source;
  return is_method(node, {"type"}) && node.args().size() == 2 ? node.args()[0].node() : nullptr;
}

bool is_value_check(const Node& node) {
  return is_function(node, {"aten._assert_tensor_metadata.default"});
}

Call sdpa_call(Node* q, Node* k, Node* v, Node* mask, double scale, bool aten) {
  Call call{NodeKind::CallFunction,
            Symbol::intern(aten ? "aten.scaled_dot_product_attention.default"
                                : "torch._C._nn.scaled_dot_product_attention"),
            {q, k, v},
            {}};
  if (mask) call.kwargs.set("attn_mask", mask);
  call.kwargs.set("scale", scale);
  return call;
}

bool is_sdpa_call(const Node& node) {
  return is_function(node, {"aten.scaled_dot_product_attention.default",
                            "torch._C._nn.scaled_dot_product_attention"});
}

Node* insert_last_two_transpose(Rewriter& rewriter, Node* anchor, Node* x, bool aten) {
  return aten ? rewriter.insert_before(anchor, NodeKind::CallFunction,
                                       Symbol::intern("aten.transpose.int"), "transpose",
                                       {x, -2, -1})
              : rewriter.insert_before(anchor, NodeKind::CallMethod, Symbol::intern("transpose"),
                                       "transpose", {x, -2, -1});
}

Node* insert_additive_mask(Rewriter& rewriter, Node* anchor, const MaskFill& fill, bool aten) {
  Arg masked(fill.fill), kept(0.0);
  Args args =
      fill.fill_where ? Args{fill.condition, masked, kept} : Args{fill.condition, kept, masked};
  return rewriter.insert_before(anchor, NodeKind::CallFunction,
                                Symbol::intern(aten ? "aten.where.Scalar" : "torch.where"),
                                "attn_mask", std::move(args));
}

}  // namespace fxopt
