#include "passes/linear_chain.h"

#include "passes/linear_rewrite.h"
#include "rewrite/capture.h"

namespace fxopt {

const Symbol kReshape = Symbol::intern("aten.reshape.default");

namespace {
const Symbol kAdd = Symbol::intern("aten.add.Tensor");

// The record (besides the pass's own fields): the Linear, captured; whether x was flattened and
// the Linear had a bias (the chain's shape); the attributes the pass stored.
constexpr RecordKey<Arg> kNodes{"nodes"};
constexpr RecordKey<bool> kFlattened{"flattened"};
constexpr RecordKey<bool> kBias{"bias"};
constexpr RecordKey<std::vector<std::string>> kAttributes{"attributes"};
}  // namespace

std::optional<LinearView> quantizable_weight(PassContext& ctx, Node* node,
                                             std::string_view kernel) {
  std::string why_not;
  std::optional<LinearView> view = as_linear(ctx.rewriter.program(), *node, &why_not);
  if (!view) return ctx.skip(*node, why_not), std::nullopt;
  if (view->dtype() != "float32")
    return ctx.skip(*node, "its weight is " + view->dtype() + ", not float32"), std::nullopt;
  if (view->device() != "cpu")
    return ctx.skip(*node, "its weight is on " + view->device() + "; " + std::string(kernel) +
                               " is CPU-only"),
           std::nullopt;
  return view;
}

std::optional<QuantizableLinear> quantizable_linear(PassContext& ctx, Node* node,
                                                    std::string_view kernel) {
  std::optional<LinearView> view = quantizable_weight(ctx, node, kernel);
  if (!view) return std::nullopt;
  // A Linear keeps its input's rank: its own recorded one stands in where an earlier pass made
  // the input (whose sizes fx recorded nothing of).
  std::optional<int> rank = view->input->rank();
  if (!rank) rank = node->rank();
  if (!rank || *rank < 1)
    return ctx.skip(*node,
                    "the rank of its input is not known (symbolic traces record it once "
                    "torch.fx.passes.shape_prop.ShapeProp has run)"),
           std::nullopt;
  return QuantizableLinear{std::move(*view), *rank};
}

Node* flat_linear_input(ChainBuilder& chain, const LinearView& view, Node* x, int rank) {
  if (rank == 2) return x;
  return chain.call(kReshape, "flat", {x, List{{int64_t{-1}, view.in_features}}});
}

Node* end_linear_chain(PassContext& ctx, ChainBuilder& chain, const LinearView& view, Node* node,
                       Node* y, int rank, std::string_view name, bool use_recorded, Arg captured,
                       std::vector<std::string> attributes, Record extra) {
  if (view.has_bias())
    y = chain.call(kAdd, "add", {y, read_linear_tensor(ctx.rewriter, view, node, "bias")});
  if (rank != 2)
    y = chain.call(kReshape, name,
                   {y, output_shape(chain, view.input, rank, view.out_features, use_recorded)});
  return replace_linear(ctx, view, node, y, std::move(captured), std::move(attributes),
                        std::move(extra), {.flattened = rank != 2, .bias_added = view.has_bias()});
}

Node* replace_linear(PassContext& ctx, const LinearView& view, Node* node, Node* y, Arg captured,
                     std::vector<std::string> attributes, Record record, ChainEnds ends,
                     Node* fused) {
  Rewriter& rewriter = ctx.rewriter;
  Node* weight_read = view.weight_node;
  rewriter.replace_and_erase(fused ? fused : node, y);
  if (fused) rewriter.erase(node);
  if (weight_read) rewriter.erase_if_unused_read(weight_read);
  record.set(kNodes, std::move(captured));
  record.set(kFlattened, ends.flattened);
  record.set(kBias, ends.bias_added);
  record.set(kAttributes, std::move(attributes));
  set_reversal_record(rewriter, y, ctx.signature, record);
  ctx.changed(y);
  return y;
}

bool linear_chain_flattened(const RecordReader& record) { return record.get(kFlattened); }

Node* walk_linear_chain_end(ChainWalker& walk, Node* node, const RecordReader& record) {
  Node* y = node;
  if (linear_chain_flattened(record)) {
    y = walk.operand(y, kReshape, 0);
    const std::vector<Arg>* sizes = node->args().size() > 1 ? node->args()[1].sequence() : nullptr;
    if (!sizes) walk.mismatch();
    for (const Arg& size : *sizes)
      if (Node* read = size.node()) walk.operand(read, kSymSize, 0);
  }
  if (record.get(kBias)) y = walk.operand(y, kAdd, 0);
  return y;
}

void restore_linear_chain(PassContext& ctx, ChainWalker& walk, Node* node, Node* x,
                          const RecordReader& record) {
  Rewriter& rewriter = ctx.rewriter;
  std::vector<std::string> attributes = record.get(kAttributes);  // the quantized weight, scales
  Node* inputs[] = {x};
  std::vector<Node*> rebuilt = rebuild_nodes(rewriter, node, record.get(kNodes), inputs);
  rewriter.replace_all_uses(node, rebuilt.back());
  walk.erase(rewriter);
  for (const std::string& path : attributes) rewriter.remove_attribute(path);
  ctx.restored(rebuilt.back());
}

}  // namespace fxopt
