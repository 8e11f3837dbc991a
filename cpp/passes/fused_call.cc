#include "passes/fused_call.h"

#include <ranges>

#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The record: the nodes the fused call replaced, captured.
constexpr RecordKey<Arg> kNodes{"nodes"};

}  // namespace

Node* replace_by_fused_call(PassContext& ctx, const std::vector<Node*>& chain, Arg captured,
                            Symbol target, std::string_view name, Args args, Kwargs kwargs) {
  Rewriter& rewriter = ctx.rewriter;
  Node* result = chain.back();
  Node* fused = rewriter.insert_before(result, NodeKind::CallFunction, target, name,
                                       std::move(args), std::move(kwargs));
  rewriter.share_value_info(*result, fused);
  rewriter.replace_all_uses(result, fused);
  for (Node* erased : std::views::reverse(chain)) rewriter.erase(erased);
  set_reversal_record(rewriter, fused, ctx.signature, Record().set(kNodes, std::move(captured)));
  ctx.changed(fused);
  return fused;
}

Arg stored_tensor_operand(Rewriter& rewriter, const StoredParams& params, Node* anchor,
                          std::string_view name) {
  const StoredParam* param = params.find(name);
  if (!param || !param->tensor) return None{};
  if (params.module.empty()) return *params.node->input(param->index, name);
  return rewriter.read_attribute(anchor, params.module + "." + std::string(name));
}

void restore_fused_chain(PassContext& ctx, Node* call, const RecordReader& record,
                         std::span<Node* const> inputs,
                         std::initializer_list<size_t> tensor_operands,
                         std::initializer_list<size_t> created_operands) {
  Rewriter& rewriter = ctx.rewriter;
  std::vector<Node*> rebuilt = rebuild_nodes(rewriter, call, record.get(kNodes), inputs);
  std::vector<Node*> reads;
  std::vector<Symbol> created;
  for (size_t i : tensor_operands)
    if (Node* read = call->args()[i].node()) reads.push_back(read);
  for (size_t i : created_operands)
    if (Node* read = call->args()[i].node()) {
      reads.push_back(read);
      created.push_back(read->target());
    }
  rewriter.replace_and_erase(call, rebuilt.back());
  for (Node* read : reads) rewriter.erase_if_unused_read(read);
  for (const Symbol& path : created)
    if (rewriter.program().attributes.contains(path.str()) &&
        rewriter.graph().find(NodeKind::GetAttr, path).empty())
      rewriter.remove_attribute(path.str());
  ctx.restored(rebuilt.back());
}

}  // namespace fxopt
