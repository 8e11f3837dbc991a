#include "passes/fold_batch_norm.h"

#include "ops/input_slot.h"
#include "passes/replace_params.h"
#include "rewrite/capture.h"

namespace fxopt {
namespace {

// The record: the op's replaced weight and bias (kReplacedParams), the batch norm as captured,
// on which side of the op it was, and the op's other readers (of its output shape).
constexpr RecordKey<Arg> kBatchNorm{"batch_norm"};
constexpr RecordKey<std::string> kSide{"side"};
constexpr RecordKey<std::vector<Node*>> kShapeReaders{"shape_readers"};
constexpr std::string_view kAfter = "after", kBefore = "before";

constexpr size_t kDataIndex = 0;
constexpr std::string_view kDataKeyword = "input";

void set_data_operand(Rewriter& rewriter, Node* op, Node* value) {
  auto [args, kwargs] = with_operand(*op, kDataIndex, kDataKeyword, Arg(value));
  rewriter.set_inputs(op, std::move(args), std::move(kwargs));
}

// Erases the batch norm's nodes (users first) and the statistics reads only they used.
void erase_batch_norm(Rewriter& rewriter, const BatchNorm& bn) {
  std::vector<Node*> reads;
  for (const Arg& a : bn.node->args()) a.for_each_node([&](Node* n) { reads.push_back(n); });
  for (const auto& [key, a] : bn.node->kwargs().items)
    a.for_each_node([&](Node* n) { reads.push_back(n); });
  std::vector<Node*> nodes = bn.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) rewriter.erase(*it);
  for (Node* read : reads) rewriter.erase_if_unused_read(read);
}

}  // namespace

std::optional<Arg> capture_batch_norm(const BatchNorm& bn) {
  Node* input = bn.input;
  return capture_nodes(bn.nodes(), std::span<Node* const>(&input, 1));
}

void absorb_batch_norm(PassContext& ctx, const StoredParams& op, const BatchNorm& bn, Arg captured,
                       BatchNormSide side, const FoldedParams& folded) {
  Rewriter& rewriter = ctx.rewriter;
  // Reads of the op's output shape (the only users besides the batch norm a fold allows) keep
  // reading it; reverse must not move them to the rebuilt batch norm.
  std::vector<Node*> shape_readers;
  if (side == BatchNormSide::After)
    for (Node* user : op.node->users())
      if (user != bn.node) shape_readers.push_back(user);
  if (side == BatchNormSide::After)
    rewriter.replace_all_uses(bn.result, op.node);
  else
    set_data_operand(rewriter, op.node, bn.input);
  erase_batch_norm(rewriter, bn);
  Arg params =
      replace_params(rewriter, op, {{"weight", folded.weight}, {"bias", folded.bias}}, "fused");
  Record record;
  record.set(kReplacedParams, std::move(params))
      .set(kBatchNorm, std::move(captured))
      .set(kSide, std::string(side == BatchNormSide::After ? kAfter : kBefore))
      .set(kShapeReaders, std::move(shape_readers));
  set_reversal_record(rewriter, op.node, ctx.signature, record);
  ctx.changed(op.node);
}

void restore_batch_norm(PassContext& ctx, Node* op, const RecordReader& record) {
  Rewriter& rewriter = ctx.rewriter;
  restore_params(rewriter, op, record.get(kReplacedParams));
  RecordField side = record.at(kSide);
  if (side.text() == kAfter) {
    std::vector<Node*> bn = rebuild_nodes(rewriter, op->next(), record.get(kBatchNorm), {&op, 1});
    rewriter.replace_all_uses(op, bn.back(), /*except=*/bn.front());
    // Records written before shape readers were kept have none.
    if (std::optional<std::vector<Node*>> readers = record.find(kShapeReaders, rewriter.graph()))
      for (Node* reader : *readers) {
        Args args = reader->args();
        args.at(0) = op;
        rewriter.set_args(reader, std::move(args));
      }
  } else if (side.text() == kBefore) {
    const Arg* data = op->input(kDataIndex, kDataKeyword);
    if (!data || !data->node()) throw PassError(*op, "its data operand is not a graph value");
    Node* input = data->node();
    std::vector<Node*> bn = rebuild_nodes(rewriter, op, record.get(kBatchNorm), {&input, 1});
    set_data_operand(rewriter, op, bn.back());
  } else {
    side.fail("is neither 'after' nor 'before'");
  }
  ctx.restored(op);
}

}  // namespace fxopt
