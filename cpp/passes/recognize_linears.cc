#include "passes/recognize_linears.h"

#include <algorithm>

#include "ops/decomposed_linear.h"
#include "ops/reshape.h"
#include "ops/targets.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The record: the product's nodes, captured; the values they read besides the input; the weight
// attribute the Linear reads; the transposed view of it the pass stored, if any.
constexpr RecordKey<Arg> kNodes{"nodes"};
constexpr RecordKey<std::vector<Node*>> kOutside{"outside"};
constexpr RecordKey<std::string> kWeight{"weight"};
constexpr RecordKey<std::optional<std::string>> kCreated{"created"};

struct FlattenViews {
  Node* source;     // x, N-D
  Node* flatten;    // x.view(-1, in)
  Node* unflatten;  // the product's result viewed back to x's leading sizes + out
};

bool known(const Node& node) { return node.rank().has_value(); }

// The views around `view` if the recorded shapes prove that they only flatten x's leading
// dimensions and restore them, so linear(x) computes the unflatten's value; else nullopt.
std::optional<FlattenViews> flatten_views(const DecomposedLinear& view) {
  Node* flatten = view.input;
  Node* source = reshape_source(*flatten);
  Node* result = view.result();
  if (!source || flatten->users().size() != 1 || result->users().size() != 1) return std::nullopt;
  Node* unflatten = result->users().front();
  if (reshape_source(*unflatten) != result || !known(*source) || !known(*flatten) ||
      !known(*unflatten))
    return std::nullopt;
  const std::vector<int64_t>& x = source->shape();
  if (x.empty() || x.back() != view.in_features || flatten->shape().empty() ||
      flatten->shape().back() != view.in_features)
    return std::nullopt;
  std::vector<int64_t> expected(x.begin(), x.end() - 1);
  expected.push_back(view.out_features);
  // fx records a symbolic size as -1: equal -1s prove nothing.
  bool proven = unflatten->shape() == expected &&
                std::all_of(expected.begin(), expected.end(), [](int64_t s) { return s >= 0; });
  if (!proven) return std::nullopt;
  return FlattenViews{source, flatten, unflatten};
}

// Nodes outside `pattern` that its nodes read, other than get_attr reads (a capture names
// those by path) and `input`: the sizes of an unflatten, a transposition other nodes read too.
std::vector<Node*> outside_reads(const std::vector<Node*>& pattern, Node* input) {
  std::vector<Node*> found = {input};
  auto visit = [&](Node* n) {
    if (n->kind() != NodeKind::GetAttr && std::ranges::find(pattern, n) == pattern.end() &&
        std::ranges::find(found, n) == found.end())
      found.push_back(n);
  };
  for (const Node* node : pattern) {
    node->for_each_input(visit);
  }
  return found;
}

Node* weight_read(const Node& linear) {
  const Arg* weight = linear.input(1, "weight");
  return weight ? weight->node() : nullptr;
}

}  // namespace

std::vector<Trigger> RecognizeLinears::triggers() const { return decomposed_linear_triggers(); }

void RecognizeLinears::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  std::string why_not;
  std::optional<DecomposedLinear> view = as_decomposed_linear(rewriter.program(), *node, &why_not);
  if (!view) return ctx.skip(*node, why_not);
  std::optional<FlattenViews> views = flatten_views(*view);

  // What the Linear replaces, in graph order; the last one is its result. Each is read only
  // by the next ones, but for the result.
  std::vector<Node*> pattern = {view->product};
  if (view->bias_add) pattern.push_back(view->bias_add);
  if (view->transpose && view->transpose->users().size() == 1) pattern.push_back(view->transpose);
  if (views) pattern.insert(pattern.end(), {views->flatten, views->unflatten});
  std::sort(pattern.begin(), pattern.end(),
            [&](Node* a, Node* b) { return rewriter.graph().before(a, b); });
  Node* input = views ? views->source : view->input;
  std::vector<Node*> inputs = outside_reads(pattern, input);
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  Node* result = pattern.back();
  Node* weight = view->weight_read;
  std::optional<std::string> created;
  if (!view->transpose) {
    TensorInfo transposed =
        stored_like(ctx.tensors.transposed_view(view->stored_weight, 0, 1), view->stored_weight);
    std::string path = rewriter.unique_path(view->weight_read->target().str() + "_t");
    rewriter.set_attribute(path, transposed);
    weight = rewriter.insert_before(result, NodeKind::GetAttr, Symbol::intern(path), path, {});
    created = path;
  }
  Args args = {input, weight};
  if (view->bias_read) args.push_back(view->bias_read);
  Symbol target = view->aten ? targets::kAtenLinear : targets::kFunctionalLinear;
  Node* linear =
      rewriter.insert_before(result, NodeKind::CallFunction, target, "linear", std::move(args));
  rewriter.replace_all_uses(result, linear);
  for (auto it = pattern.rbegin(); it != pattern.rend(); ++it) rewriter.erase(*it);
  rewriter.erase_if_unused_read(view->weight_read);

  Record record;
  record.set(kNodes, std::move(*captured))
      .set(kOutside, std::vector<Node*>(inputs.begin() + 1, inputs.end()))
      .set(kWeight, weight->target().str())
      .set(kCreated, std::move(created));
  set_reversal_record(rewriter, linear, ctx.signature, record);
  ctx.changed(linear);
}

void RecognizeLinears::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  Rewriter& rewriter = ctx.rewriter;
  const std::string& weight_path = record.get(kWeight);
  const std::string* created = record.get(kCreated);
  const Arg* input = node->input(0, "input");
  Node* weight = weight_read(*node);
  if (!input || !input->node())
    throw PassError(*node, "its input is no longer a tensor produced by the graph");
  if (!weight || !weight->is(NodeKind::GetAttr, Symbol::intern(weight_path)))
    throw PassError(*node, "its weight no longer reads '" + weight_path +
                               "' (reverse the transformations applied after this one first)");

  // What the original product read besides the input.
  std::vector<Node*> inputs = {input->node()};
  for (Node* read : record.get(kOutside, rewriter.graph())) inputs.push_back(read);
  std::vector<Node*> rebuilt = rebuild_nodes(rewriter, node, record.get(kNodes), inputs);
  rewriter.replace_and_erase(node, rebuilt.back());
  rewriter.erase_if_unused_read(weight);
  if (created && rewriter.graph().find(NodeKind::GetAttr, Symbol::intern(*created)).empty())
    rewriter.remove_attribute(*created);
  ctx.restored(rebuilt.back());
}

}  // namespace fxopt
