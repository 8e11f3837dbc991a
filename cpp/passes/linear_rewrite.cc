#include "passes/linear_rewrite.h"

#include "ops/input_slot.h"
#include "ops/targets.h"

namespace fxopt {
namespace {

// The fields `describe` adds to a pass's record (prefixed: the pass adds its own).
constexpr RecordKey<NodeKind> kKind{"linear.kind"};
constexpr RecordKey<Symbol> kTarget{"linear.target"};
constexpr RecordKey<Arg> kArgs{"linear.args"};      // node references blanked
constexpr RecordKey<Arg> kKwargs{"linear.kwargs"};  // likewise
constexpr RecordKey<Arg> kWeight{"linear.weight"};  // where the weight was stored (stored_at)
constexpr RecordKey<Arg> kBias{"linear.bias"};      // likewise
constexpr RecordKey<bool> kHasBias{"linear.has_bias"};
// The other paths each tensor was stored at: (weight's, bias's); absent in older records.
constexpr RecordKey<Arg> kTies{"linear.ties"};

std::string join(const std::string& scope, const std::string& name) {
  return scope.empty() ? name : scope + "." + name;
}

// Puts `value` where the operand at index / keyword was passed: positionally if args reach it.
void put(Args& args, Kwargs& kwargs, size_t index, const char* keyword, Arg value) {
  if (index < args.size())
    args[index] = std::move(value);
  else
    kwargs.set(keyword, std::move(value));
}

// The module at `path` with new tensors; in/out features follow the weight.
ModuleInfo module_with(const Program& program, const std::string& path, const TensorInfo& weight,
                       const TensorInfo& bias) {
  ModuleInfo module = *program.module(Symbol::intern(path));
  module.attributes.set("in_features", weight.shape.at(1));
  module.attributes.set("out_features", weight.shape.at(0));
  module.tensors["weight"] = weight;
  module.tensors["bias"] = bias;
  return module;
}

// Erases the read once nothing uses it, and the attribute once nothing reads it (a tensor
// shared by several Linears goes with the last of them).
void drop_stored(Rewriter& rewriter, Node* stored) {
  rewriter.erase_if_unused_read(stored);
  if (rewriter.program().attributes.contains(stored->target().str()) &&
      rewriter.graph().find(NodeKind::GetAttr, stored->target()).empty())
    rewriter.remove_attribute(stored->target().str());
}

// Blanks node references (a Linear passes tensors only at the top level), so a record holds
// plain values only.
Arg blank(const Arg& arg) { return arg.node() ? Arg(None{}) : arg; }

Arg stored_at(Node* stored) {
  if (!stored) return None{};
  return Tuple{{Arg(stored->target().str()), Arg(stored->name())}};
}

// Stores `tensor` at the recorded path; the recorded get_attr node if it is still there, else a
// new one before `user` under the recorded name.
Node* restore_stored(Rewriter& rewriter, Node* user, const RecordField& recorded,
                     const TensorInfo& tensor) {
  std::vector<RecordField> path_name = recorded.items(2);
  const std::string& path = path_name[0].text();
  const std::string& name = path_name[1].text();
  Symbol target = Symbol::intern(path);
  rewriter.set_attribute(path, tensor);
  Node* existing = rewriter.graph().find_by_name(name);
  if (existing && existing->is(NodeKind::GetAttr, target)) return existing;
  return rewriter.insert_before(user, NodeKind::GetAttr, target, name, {});
}

}  // namespace

StoredLinear store_linear(Rewriter& rewriter, const LinearView& like, const std::string& name,
                          const TensorInfo& weight, const TensorInfo& bias) {
  std::string base = join(like.scope(), name);
  StoredLinear stored;
  if (!like.module().empty()) {
    stored.module = rewriter.unique_path(base);
    rewriter.set_module(stored.module, like.module(),
                        module_with(rewriter.program(), like.module(), weight, bias));
    return stored;
  }
  auto store = [&](const std::string& suffix, const TensorInfo& tensor) {
    std::string path = rewriter.unique_path(base + suffix);
    rewriter.set_attribute(path, tensor);
    return path;
  };
  stored.weight = store("_weight", weight);
  if (bias.present()) stored.bias = store("_bias", bias);
  return stored;
}

Node* call_linear(Rewriter& rewriter, const LinearView& like, const StoredLinear& stored,
                  Node* anchor, Node* input, const std::string& name) {
  if (!stored.module.empty())
    return rewriter.insert_before(anchor, NodeKind::CallModule, Symbol::intern(stored.module),
                                  stored.module, {input});
  Args args = {input, rewriter.read_attribute(anchor, stored.weight)};
  if (!stored.bias.empty()) args.push_back(rewriter.read_attribute(anchor, stored.bias));
  return rewriter.insert_before(anchor, NodeKind::CallFunction, like.node->target(),
                                join(like.scope(), name), std::move(args));
}

void replace_tensors(Rewriter& rewriter, const LinearView& view, const TensorInfo& weight,
                     const TensorInfo& bias) {
  if (!view.module().empty()) {
    rewriter.set_module(view.module(), view.module(),
                        module_with(rewriter.program(), view.module(), weight, bias));
    return;
  }
  rewriter.set_attribute(view.weight_node->target().str(), weight);
  Node* old_bias = view.bias_node;
  if (bias.present()) {
    rewriter.set_attribute(old_bias->target().str(), bias);
  } else if (old_bias) {
    auto [args, kwargs] = with_operand(*view.node, kLinearBias, "bias", std::nullopt);
    rewriter.set_inputs(view.node, std::move(args), std::move(kwargs));
    drop_stored(rewriter, old_bias);
  }
}

void remove_tensors(Rewriter& rewriter, const LinearView& view) {
  if (!view.module().empty()) {
    Symbol path = Symbol::intern(view.module());
    if (rewriter.program().module(path) &&
        rewriter.graph().find(NodeKind::CallModule, path).empty())
      rewriter.remove_module(view.module());
    return;
  }
  for (Node* stored : {view.weight_node, view.bias_node})
    if (stored) drop_stored(rewriter, stored);
}

Arg read_linear_tensor(Rewriter& rewriter, const LinearView& view, Node* anchor,
                       std::string_view name) {
  if (!view.params.tensor(name)) return None{};
  Node* read = name == "weight" ? view.weight_node : name == "bias" ? view.bias_node : nullptr;
  if (read) return read;
  return rewriter.read_attribute(anchor, view.module() + "." + std::string(name));
}

void set_linear_input(Rewriter& rewriter, const LinearView& view, Node* input) {
  auto [args, kwargs] = with_operand(*view.node, kLinearInput, "input", Arg(input));
  rewriter.set_inputs(view.node, std::move(args), std::move(kwargs));
}

void make_slice(Rewriter& rewriter, const LinearView& like, Node* node, Node* source, int64_t start,
                int64_t end) {
  const LinearDialect& d = *like.dialect;
  Arg last = d.aten ? end : end - start;  // aten.slice takes the end, torch.narrow the length
  rewriter.set_target(node, NodeKind::CallFunction, d.slice);
  rewriter.set_inputs(node, {source, -1, start, last}, {});
}

Node* slice_source(const Node& node) {
  bool slice = node.is(NodeKind::CallFunction, targets::kTorchNarrow) ||
               node.is(NodeKind::CallFunction, targets::kAtenSliceTensor);
  if (!slice || node.args().size() != 4 || node.args()[1] != Arg(-1)) return nullptr;
  return node.args()[0].node();
}

Node* create_ones_column(Rewriter& rewriter, const LinearView& like, Node* anchor, Node* x) {
  const LinearDialect& d = *like.dialect;
  if (d.aten)
    return rewriter.insert_before(anchor, NodeKind::CallFunction, d.pad, "constant_pad_nd",
                                  {x, List{{0, 1}}, 1.0});
  return rewriter.insert_before(anchor, NodeKind::CallFunction, d.pad, "pad", {x, Tuple{{0, 1}}},
                                Dict{{{"value", 1.0}}});
}

Node* ones_column_source(const LinearView& like, const Node& node) {
  const LinearDialect& d = *like.dialect;
  if (!node.is(NodeKind::CallFunction, d.pad) || node.args().size() < 2) return nullptr;
  const Arg& widths = node.args()[1];
  const Arg* value = d.aten ? node.input(2, "value") : node.kwargs().find("value");
  bool ones = widths.sequence() && *widths.sequence() == std::vector<Arg>{0, 1} && value &&
              value->number() == 1.0 && node.args().size() + node.kwargs().items.size() == 3;
  return ones ? node.args()[0].node() : nullptr;
}

namespace {

// Where the Linear's tensor `name` is stored: "<module>.<name>", or its get_attr's path.
std::string tensor_path(const LinearView& view, Node* read, std::string_view name) {
  return view.module().empty() ? read->target().str() : view.module() + "." + std::string(name);
}

// The other paths that held the Linear's tensor `name` (read through `read` in the get_attr
// form), if it has one.
Tuple tie_paths(const TiedTensors& tied, const LinearView& view, const TensorInfo& tensor,
                Node* read, std::string_view name) {
  Tuple out;
  if (!tensor.present()) return out;
  for (std::string& p : tied.others(tensor, tensor_path(view, read, name)))
    out.items.emplace_back(std::move(p));
  return out;
}

// The tied paths recorded for tensor `index` (0 weight, 1 bias); none in older records.
std::vector<std::string> recorded_ties(const RecordReader& record, size_t index) {
  std::optional<RecordField> ties = record.find(kTies);
  if (!ties) return {};
  std::vector<std::string> out;
  for (const RecordField& path : ties->items(2)[index].items()) out.push_back(path.text());
  return out;
}

}  // namespace

void describe(const LinearView& view, const TiedTensors& tied, Record& record) {
  Tuple args;
  for (const Arg& a : view.node->args()) args.items.push_back(blank(a));
  Dict kwargs;
  for (const auto& [key, a] : view.node->kwargs().items) kwargs.items.emplace_back(key, blank(a));
  record.set(kKind, view.node->kind())
      .set(kTarget, view.node->target())
      .set(kArgs, std::move(args))
      .set(kKwargs, std::move(kwargs))
      .set(kWeight, stored_at(view.weight_node))
      .set(kBias, stored_at(view.bias_node))
      .set(kHasBias, view.has_bias())
      .set(kTies, Tuple{{tie_paths(tied, view, view.weight, view.weight_node, "weight"),
                         tie_paths(tied, view, view.bias, view.bias_node, "bias")}});
}

bool recorded_bias(const RecordReader& record) { return record.get(kHasBias); }

void restore_linear(Rewriter& rewriter, Node* node, const RecordReader& record, Node* input,
                    const TensorInfo& computed_weight, const TensorInfo& computed_bias,
                    const LinearView& like) {
  NodeKind kind = record.get(kKind);
  Symbol target = record.get(kTarget);
  Args args;
  for (const RecordField& arg : record.get(kArgs).items()) args.push_back(arg.value());
  Kwargs kwargs = record.get(kKwargs).dict();
  if (kind != like.dialect->kind)
    throw PassError(*node,
                    "its Linear record does not match the dialect of '" + like.node->name() + "'");
  const Program& program = rewriter.program();
  TensorInfo weight = tied_tensor(program, recorded_ties(record, 0), computed_weight);
  TensorInfo bias = computed_bias.present()
                        ? tied_tensor(program, recorded_ties(record, 1), computed_bias)
                        : computed_bias;

  put(args, kwargs, kLinearInput, "input", input);
  if (kind == NodeKind::CallModule) {
    rewriter.set_module(target.str(), like.module(),
                        module_with(rewriter.program(), like.module(), weight, bias));
  } else {
    put(args, kwargs, kLinearWeight, "weight",
        restore_stored(rewriter, node, record.get(kWeight), weight));
    if (bias.present())
      put(args, kwargs, kLinearBias, "bias",
          restore_stored(rewriter, node, record.get(kBias), bias));
  }
  rewriter.set_target(node, kind, target);
  rewriter.set_inputs(node, std::move(args), std::move(kwargs));
}

}  // namespace fxopt
