#include "passes/change_precision.h"

#include <algorithm>
#include <stdexcept>

#include <unordered_map>

#include "ops/cast.h"
#include "ops/conv.h"
#include "ops/dtype_flow.h"
#include "ops/input_slot.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/stored_params.h"
#include "passes/replace_params.h"

namespace fxopt {
namespace {

struct Operand {
  size_t index;
  std::string keyword;
};

// What one candidate computes with: stored tensors (Linear, Conv) and the operands to cast.
struct Work {
  std::optional<StoredParams> params;
  std::vector<Operand> operands;
};

std::optional<Work> find_work(const Program& program, Node* node, std::string* why_not) {
  if (matches_trigger(program, *node, linear_triggers())) {
    std::optional<LinearView> linear = as_linear(program, *node, why_not);
    if (!linear) return std::nullopt;
    return Work{linear->params, {{0, "input"}}};
  }
  if (matches_trigger(program, *node, conv_triggers())) {
    std::optional<Conv> conv = as_conv(program, node, why_not);
    if (!conv) return std::nullopt;
    return Work{conv->params, {{0, "input"}}};
  }
  if (!as_matmul(*node, why_not)) return std::nullopt;
  return Work{std::nullopt, {{0, ""}, {1, ""}}};
}

Node* operand_node(const Node& node, const Operand& operand) {
  const Arg* value = node.input(operand.index, operand.keyword);
  return value ? value->node() : nullptr;
}

void set_operand(Rewriter& rewriter, Node* node, const Operand& operand, Node* value) {
  auto [args, kwargs] = with_operand(*node, operand.index, operand.keyword, Arg(value));
  rewriter.set_inputs(node, std::move(args), std::move(kwargs));
}

const Symbol kOutput = Symbol::intern("output");
// Higher-order ops (torch.export's wrap_with_set_grad_enabled, cond, ...) call nested graphs that
// this pass does not lower; what they read stays as it is.
constexpr std::string_view kHigherOrderPrefix = "torch.ops.higher_order.";
const Symbol kAssertMetadata = Symbol::intern("aten._assert_tensor_metadata.default");
// The record of graph mode: what it lowered. Of operand mode: the replaced parameters
// (kReplacedParams), if any, and the operands it cast, as (index, keyword) pairs.
constexpr RecordKey<Arg> kLowered{"lowered"};
constexpr RecordKey<Arg> kCasts{"casts"};

// Graph mode needs the dtype of every graph input (torch.export, Dynamo and ShapeProp record
// them); the dtypes of nodes earlier passes created follow from their inputs.
bool graph_has_dtypes(const Graph& graph) {
  for (Node* node = graph.first(); node && node->kind() == NodeKind::Placeholder;
       node = node->next())
    if (node->dtype().empty()) return false;
  return true;
}

// How a value's dtype relates to the lowering: not a floating tensor, lowered, kept in its full
// precision (an explicit float32 island, a constant the graph creates, a promotion), or unknown.
enum class Precision : uint8_t { NotFloat, Low, Full, Unknown };

// Lowers the whole graph: stored float32/float64 tensors are converted once, float inputs are
// cast on entry and float outputs cast back; every op in between follows its operands, so the
// only casts left inside are where an op needs one dtype and receives a full-precision value.
class GraphLowering {
 public:
  GraphLowering(PassContext& ctx, std::string_view low, const Arg& low_object,
                const Dict& full_objects, bool aten)
      : ctx_(ctx),
        rewriter_(ctx.rewriter),
        program_(rewriter_.program()),
        low_(low),
        low_object_(low_object),
        full_objects_(full_objects),
        aten_(aten) {}

  void run(Node* output) {
    std::vector<Node*> nodes;
    for (Node* node : program_.graph) nodes.push_back(node);
    for (Node* node : nodes) {
      if (node == output) break;
      state_[node] = visit(node);
    }
    cast_outputs_back(output);
  }

 private:
  Precision visit(Node* node) {
    switch (node->kind()) {
      case NodeKind::Placeholder:
        return lower_input(node);
      case NodeKind::GetAttr:
        return lower_attribute(node);
      case NodeKind::CallModule:
        return follow(node, /*low_weights=*/lower_module(node));
      default:
        if (node->is(NodeKind::CallFunction, kAssertMetadata)) lower_assertion(node);
        return follow(node);
    }
  }

  // torch.export's check of an input's metadata must expect the lowered dtype.
  void lower_assertion(Node* node) {
    const Arg* value = node->input(0, "a");
    if (value && value->node() && state_.at(value->node()) == Precision::Low) retype(node);
  }

  // Makes the op name the lowered dtype wherever it named the full one (top-level arguments).
  void retype(Node* node) {
    Args args = node->args();
    Kwargs kwargs = node->kwargs();
    Tuple originals;
    auto swap = [&](Arg& value, Arg where) {
      if (!is_full_float(program_.dtype_of(value))) return;
      originals.items.push_back(Tuple{{std::move(where), value}});
      value = low_object_;
    };
    for (size_t i = 0; i < args.size(); ++i) swap(args[i], Arg(int64_t(i)));
    for (auto& [key, value] : kwargs.items) swap(value, Arg(key));
    if (originals.items.empty()) return;
    rewriter_.set_inputs(node, std::move(args), std::move(kwargs));
    changed(node, Tuple{{Arg("dtypes"), Arg(std::move(originals))}});
  }

  Precision of_dtype(std::string_view dtype) const {
    if (dtype.empty()) return Precision::Unknown;
    if (dtype == low_) return Precision::Low;
    return is_float(dtype) ? Precision::Full : Precision::NotFloat;
  }

  Precision lower_input(Node* node) {
    if (!is_full_float(node->dtype()) || node->users().empty()) return of_dtype(node->dtype());
    full_dtype(node->dtype(), *node);
    Node* anchor = node;
    while (anchor->kind() == NodeKind::Placeholder) anchor = anchor->next();
    Node* cast = insert_cast(rewriter_, anchor, node, low_object_, aten_);
    rewriter_.replace_all_uses(node, cast, /*except=*/cast);
    state_[cast] = Precision::Low;
    changed(cast, "cast");
    return Precision::Full;
  }

  Precision lower_attribute(Node* node) {
    const TensorInfo* tensor = program_.attribute(node->target());
    if (!tensor) return Precision::NotFloat;
    if (!is_full_float(tensor->dtype)) return of_dtype(tensor->dtype);
    if (std::ranges::all_of(node->users(), [&](Node* user) {
          return follows_first_operand(*user) && user->args().at(0).node() != node;
        }))
      return Precision::Full;  // int8 scales and biases, read as float32: lowering only loses bits
    for (Node* user : node->users())
      if (user->target().str().starts_with(kHigherOrderPrefix)) {
        ctx_.skip(*node,
                  "read inside a nested graph (" + user->name() + "), which keeps its own dtypes");
        return Precision::Full;
      }
    full_dtype(tensor->dtype, *node);
    const std::string& path = node->target().str();
    auto [it, fresh] = attributes_.try_emplace(path);
    if (fresh) {
      it->second = rewriter_.unique_path(path + "_" + low_);
      rewriter_.set_attribute(it->second, stored_like(ctx_.tensors.cast(*tensor, low_), *tensor));
    }
    rewriter_.set_target(node, NodeKind::GetAttr, Symbol::intern(it->second));
    changed(node, Tuple{{Arg("attribute"), Arg(path)}});
    return Precision::Low;
  }

  // True where the module's weights are now in the lowered dtype.
  bool lower_module(Node* node) {
    const std::string& path = node->target().str();
    const ModuleInfo* module = program_.module(node->target());
    if (!module) return false;
    std::map<std::string, TensorInfo> lowered;
    for (const auto& [name, tensor] : module->tensors)
      if (tensor.present() && is_full_float(tensor.dtype)) {
        full_dtype(tensor.dtype, *node);
        lowered[name] = stored_like(ctx_.tensors.cast(tensor, low_), tensor);
      }
    if (lowered.empty()) return false;
    auto [it, fresh] = modules_.try_emplace(path);
    if (fresh) {
      ModuleInfo copy = *module;
      for (auto& [name, tensor] : lowered) copy.tensors[name] = std::move(tensor);
      it->second = rewriter_.unique_path(path + "_" + low_);
      rewriter_.set_module(it->second, path, std::move(copy));
    }
    rewriter_.set_target(node, NodeKind::CallModule, Symbol::intern(it->second));
    changed(node, Tuple{{Arg("module"), Arg(path)}});
    return true;
  }

  // The precision of an op's result from its operands (and a module's own weights, lowered
  // where `low_weights`: an Embedding's result is lowered though its operand, the ids, is no
  // float), casting full-precision operands of ops that need one dtype.
  Precision follow(Node* node, bool low_weights = false) {
    if (!node->dtype().empty() && !is_float(node->dtype())) return Precision::NotFloat;
    if (follows_first_operand(*node)) {
      Node* x = node->args().at(0).node();
      if (!x) return Precision::Unknown;
      if (state_.at(x) == Precision::Low && read_by_output_only(*node)) return widen_input(node, x);
      return state_.at(x);
    }
    if (std::string_view named = explicit_result_dtype(program_, *node); !named.empty()) {
      if (!kept_dtype(*node, named)) return of_dtype(named);
      if (is_full_float(named) && all_float_operands_low(*node)) {
        retype(node);
        return Precision::Low;
      }
    }
    bool low = low_weights, full = false;
    std::vector<Node*> full_operands;
    auto see = [&](Node* input) {
      Precision p = state_.at(input);
      low |= p == Precision::Low;
      if (p == Precision::Full) {
        full = true;
        full_operands.push_back(input);
      }
    };
    node->for_each_input(see);
    if (low && full && needs_matching_float_operands(program_, *node)) {
      cast_operands(node, full_operands);
      return Precision::Low;
    }
    if (full) return Precision::Full;
    if (low) return Precision::Low;
    // No floating operand: a float result is a constant the graph creates (kept as it is).
    return node->dtype().empty() ? Precision::Unknown : Precision::Full;
  }

  // True if the op named the dtype its floating operands already had when the graph was
  // traced: a model casting to "its" dtype (RMSNorm's x.to(input_dtype), softmax(...,
  // dtype=x.dtype)) traced as float32, which in a lowered graph means the lowered dtype.
  bool kept_dtype(const Node& node, std::string_view named) const {
    bool any = false, all = true;
    auto see = [&](Node* input) {
      if (!is_float(input->dtype())) return;
      any = true;
      all &= input->dtype() == named;
    };
    node.for_each_input(see);
    return any && all;
  }

  bool all_float_operands_low(const Node& node) const {
    bool all = true;
    auto see = [&](Node* input) {
      Precision p = state_.at(input);
      all &= p != Precision::Full && p != Precision::Unknown;
    };
    node.for_each_input(see);
    return all;
  }

  static bool read_by_output_only(const Node& node) {
    return std::ranges::all_of(node.users(),
                               [](const Node* user) { return user->kind() == NodeKind::Output; });
  }

  // An int8 Linear whose result is a graph output (GPT-2's [tokens, 50257] logits) reads its
  // input cast back up instead: its result is then already in the output's dtype, where a
  // lowered result would be cast down inside the call and back up at the output, two passes over
  // the widest tensor of the graph for one over its input.
  Precision widen_input(Node* node, Node* x) {
    const Arg* full = full_objects_.find(full_dtype_);
    if (!full) throw PassError(*node, "no dtype object given for " + full_dtype_);
    Node* cast = insert_cast(rewriter_, node, x, *full, aten_);
    state_[cast] = Precision::Full;
    changed(cast, "cast");
    auto [args, kwargs] = with_operand(*node, 0, "x", Arg(cast));
    rewriter_.set_inputs(node, std::move(args), std::move(kwargs));
    return Precision::Full;
  }

  void cast_operands(Node* node, const std::vector<Node*>& operands) {
    std::unordered_map<Node*, Node*> casts;
    for (Node* operand : operands) {
      auto [it, fresh] = low_casts_.try_emplace(operand);
      if (fresh) {
        it->second = insert_cast(rewriter_, node, operand, low_object_, aten_);
        state_[it->second] = Precision::Low;
        changed(it->second, "cast");
      }
      casts[operand] = it->second;
    }
    auto swap = [&](Node* n) {
      auto it = casts.find(n);
      return it == casts.end() ? n : it->second;
    };
    Args args;
    for (const Arg& arg : node->args()) args.push_back(arg.map_nodes(swap));
    Kwargs kwargs;
    for (const auto& [key, value] : node->kwargs().items)
      kwargs.items.emplace_back(key, value.map_nodes(swap));
    rewriter_.set_inputs(node, std::move(args), std::move(kwargs));
  }

  void cast_outputs_back(Node* output) {
    if (full_dtype_.empty()) return;  // nothing was lowered
    const Arg* back_object = full_objects_.find(full_dtype_);
    if (!back_object) throw PassError(*output, "no dtype object given for " + full_dtype_);
    std::unordered_map<Node*, Node*> back;
    auto swap = [&](Node* n) -> Node* {
      Precision p = state_.at(n);
      if (p != Precision::Low && p != Precision::Unknown) return n;
      if (p == Precision::Unknown && !is_full_float(n->dtype())) return n;
      auto [it, fresh] = back.try_emplace(n);
      if (fresh) {
        it->second = insert_cast(rewriter_, output, n, *back_object, aten_);
        changed(it->second, "cast");
      }
      return it->second;
    };
    Args args;
    for (const Arg& arg : output->args()) args.push_back(arg.map_nodes(swap));
    if (!back.empty()) rewriter_.set_inputs(output, std::move(args), output->kwargs());
  }

  // One full precision per graph, so outputs go back to the dtype the graph computed in.
  void full_dtype(std::string_view dtype, const Node& node) {
    if (full_dtype_.empty()) full_dtype_ = dtype;
    if (full_dtype_ != dtype)
      throw PassError(node, "the graph mixes " + full_dtype_ + " and " + std::string(dtype) +
                                "; lowering it would not know which dtype to give back");
  }

  void changed(Node* node, Arg what) {
    set_reversal_record(rewriter_, node, ctx_.signature, Record().set(kLowered, what));
    ctx_.changed(node);
  }

  PassContext& ctx_;
  Rewriter& rewriter_;
  const Program& program_;
  std::string low_;
  const Arg& low_object_;
  const Dict& full_objects_;
  bool aten_;
  std::string full_dtype_;
  std::unordered_map<Node*, Precision> state_;
  std::unordered_map<Node*, Node*> low_casts_;
  std::map<std::string, std::string> attributes_, modules_;  // original path -> lowered copy
};

// An ATen graph gets ATen casts; any other graph gets `.to()` method calls.
bool is_aten_graph(const Graph& graph) {
  for (Node* node : graph)
    if (node->kind() == NodeKind::CallFunction) return is_aten_call(*node);
  return false;
}

void restore_lowered(Rewriter& rewriter, Node* node, const RecordField& what) {
  if (what.value().is<std::string>()) {  // a cast the lowering inserted
    Node* source = cast_source(*node);
    if (!source) throw PassError(*node, "is no longer the cast this transformation made");
    rewriter.replace_and_erase(node, source);
    return;
  }
  std::vector<RecordField> entry = what.items(2);
  const std::string& changed = entry[0].text();
  if (changed == "dtypes") {  // (operand position or keyword, original dtype) pairs
    Args args = node->args();
    Kwargs kwargs = node->kwargs();
    for (const RecordField& item : entry[1].items()) {
      std::vector<RecordField> where_what = item.items(2);
      if (where_what[0].value().is<std::string>())
        kwargs.set(where_what[0].text(), where_what[1].value());
      else
        args[where_what[0].index(args.size())] = where_what[1].value();
    }
    rewriter.set_inputs(node, std::move(args), std::move(kwargs));
    return;
  }
  if (changed != "module" && changed != "attribute")
    entry[0].fail("is none of 'dtypes', 'module' and 'attribute'");
  bool module = changed == "module";
  NodeKind kind = module ? NodeKind::CallModule : NodeKind::GetAttr;
  Symbol lowered = node->target();
  rewriter.set_target(node, kind, Symbol::intern(entry[1].text()));
  if (!rewriter.graph().find(kind, lowered).empty()) return;  // still read elsewhere
  if (module)
    rewriter.remove_module(lowered.str());
  else
    rewriter.remove_attribute(lowered.str());
}

}  // namespace

ChangePrecision::ChangePrecision(std::string dtype, Arg dtype_object, Dict full_dtype_objects)
    : dtype_(std::move(dtype)),
      dtype_object_(std::move(dtype_object)),
      full_dtype_objects_(std::move(full_dtype_objects)) {
  if (dtype_ != "float16" && dtype_ != "bfloat16")
    throw std::invalid_argument("ChangePrecision takes float16 or bfloat16, not " + dtype_);
}

std::vector<Trigger> ChangePrecision::triggers() const {
  std::vector<Trigger> triggers = linear_triggers();
  for (const auto& more : {conv_triggers(), matmul_triggers()})
    triggers.insert(triggers.end(), more.begin(), more.end());
  triggers.push_back({NodeKind::Output, kOutput});
  return triggers;
}

namespace {

bool lowered_before(const PassContext& ctx) {
  for (const Node* n : ctx.rewriter.graph())
    if (ctx.marked(*n)) return true;
  return false;
}

}  // namespace

void ChangePrecision::rewrite(PassContext& ctx, Node* node) const {
  // With the graph's dtypes known, the output node (the last candidate) lowers the whole graph
  // at once; without them, each op is lowered alone, between casts.
  if (graph_has_dtypes(ctx.rewriter.graph())) {
    if (node->kind() != NodeKind::Output) return;
    // The same lowering again (equal parameters sign alike) would lower its own casts: the
    // graph is left as it is.
    if (lowered_before(ctx))
      return ctx.skip(*node,
                      "the graph is already lowered to " + dtype_ + " by this transformation");
    return GraphLowering(ctx, dtype_, dtype_object_, full_dtype_objects_,
                         is_aten_graph(ctx.rewriter.graph()))
        .run(node);
  }
  if (node->kind() == NodeKind::Output) return;
  std::string why_not;
  std::optional<Work> work = find_work(ctx.rewriter.program(), node, &why_not);
  if (!work) return ctx.skip(*node, why_not);
  if (work->params) {
    const std::string& dtype = work->params->tensor("weight")->dtype;
    if (dtype != "float32" && dtype != "float64")
      return ctx.skip(*node, "its weight is " + dtype + ", not float32 or float64");
  }

  Rewriter& rewriter = ctx.rewriter;
  Record record;
  if (work->params) {
    std::map<std::string, TensorInfo> low;
    for (const StoredParam& p : work->params->params)
      if (p.tensor) low[p.name] = ctx.tensors.cast(*p.tensor, dtype_);
    record.set(kReplacedParams, replace_params(rewriter, *work->params, low, dtype_));
  }
  bool aten = is_aten_call(*node);
  Node* first = operand_node(*node, work->operands.front());
  Tuple casts;
  for (const Operand& operand : work->operands) {
    Node* cast = insert_cast(rewriter, node, operand_node(*node, operand), dtype_object_, aten);
    set_operand(rewriter, node, operand, cast);
    casts.items.push_back(Tuple{{Arg(int64_t(operand.index)), Arg(operand.keyword)}});
  }
  Node* back = insert_type_as(rewriter, node->next(), node, first, aten);
  rewriter.replace_all_uses(node, back, /*except=*/back);
  record.set(kCasts, std::move(casts));
  set_reversal_record(rewriter, node, ctx.signature, record);
  ctx.changed(node);
}

void ChangePrecision::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  Rewriter& rewriter = ctx.rewriter;
  if (std::optional<RecordField> lowered = record.find(kLowered)) {
    restore_lowered(rewriter, node, *lowered);
    if (!node->erased()) ctx.restored(node);
    return;
  }
  if (std::optional<RecordField> params = record.find(kReplacedParams))
    restore_params(rewriter, node, *params);
  for (const RecordField& entry : record.get(kCasts).items()) {
    std::vector<RecordField> index_keyword = entry.items(2);
    int64_t index = index_keyword[0].integer();
    if (index < 0) index_keyword[0].fail("is not an operand position");
    Operand operand{size_t(index), index_keyword[1].text()};
    Node* cast = operand_node(*node, operand);
    Node* source = cast ? cast_source(*cast) : nullptr;
    if (!source)
      throw PassError(*node, "operand " + std::to_string(operand.index) +
                                 " is no longer the cast this transformation made");
    set_operand(rewriter, node, operand, source);
    if (cast->users().empty()) rewriter.erase(cast);
  }
  Node* back = nullptr;
  for (Node* user : node->users())
    if (!back && cast_source(*user) == node) back = user;
  if (!back) throw PassError(*node, "its result is no longer cast back");
  rewriter.replace_and_erase(back, node);
  ctx.restored(node);
}

}  // namespace fxopt
