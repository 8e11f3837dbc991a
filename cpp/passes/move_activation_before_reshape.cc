#include "passes/move_activation_before_reshape.h"

#include <algorithm>

#include "ops/activation.h"
#include "ops/input_slot.h"
#include "ops/linear.h"
#include "ops/reshape.h"
#include "rewrite/capture.h"
#include "rewrite/marks.h"

namespace fxopt {
namespace {

// The record: the activation as it was, captured, reading the reshape (input 0).
constexpr RecordKey<Arg> kActivation{"activation"};

// `reshape` reading `source` in place of its data operand.
void read_from(Rewriter& rewriter, Node* reshape, Node* source) {
  auto [args, kwargs] = with_operand(*reshape, 0, "input", Arg(source));
  rewriter.set_inputs(reshape, std::move(args), std::move(kwargs));
}

}  // namespace

std::vector<Trigger> MoveActivationBeforeReshape::triggers() const {
  std::vector<Trigger> all;  // once each: gelu and gelu_tanh share their calls
  for (const std::string& name : activation_names())
    for (const Trigger& trigger : activation_triggers(name))
      if (std::ranges::none_of(all, [&](const Trigger& t) {
            return t.kind == trigger.kind && t.target == trigger.target;
          }))
        all.push_back(trigger);
  return all;
}

void MoveActivationBeforeReshape::rewrite(PassContext& ctx, Node* node) const {
  Rewriter& rewriter = ctx.rewriter;
  const Program& program = rewriter.program();
  std::string why_not;
  std::optional<Activation> activation = as_activation(program, *node, &why_not);
  if (!activation) return ctx.skip(*node, why_not);
  if (activation->in_place) return ctx.skip(*node, "it writes its input in place");
  Node* reshape = activation->input;
  Node* source = reshape ? reshape_source(*reshape) : nullptr;
  if (!source) return ctx.skip(*node, "its input is no reshape");
  if (reshape->users().size() != 1) return ctx.skip(*node, "the reshape has other readers");
  if (!matches_trigger(program, *source, linear_triggers()))
    return ctx.skip(*node, "the reshape's input is no Linear");
  Node* inputs[] = {reshape};
  Node* pattern[] = {node};
  std::optional<Arg> captured = capture_nodes(pattern, inputs);
  if (!captured) return ctx.skip(*node, "reads values a reversal record cannot hold");

  ActivationCall call = activation_call(activation->name, source, activation->aten);
  Node* moved = rewriter.insert_before(reshape, call.kind, call.target, activation->name,
                                       std::move(call.args), std::move(call.kwargs));
  rewriter.share_value_info(*source, moved);
  read_from(rewriter, reshape, moved);
  rewriter.replace_all_uses(node, reshape);
  rewriter.erase(node);
  set_reversal_record(rewriter, moved, ctx.signature, Record().set(kActivation, *captured));
  ctx.changed(moved);
}

void MoveActivationBeforeReshape::restore(PassContext& ctx, Node* node,
                                          const RecordReader& record) const {
  Rewriter& rewriter = ctx.rewriter;
  Node* source = node->args().empty() ? nullptr : node->args()[0].node();
  Node* reshape = node->users().size() == 1 ? node->users().front() : nullptr;
  if (!source || !reshape || reshape_source(*reshape) != node)
    throw PassError(*node, "is no longer the activation this transformation moved");
  read_from(rewriter, reshape, source);
  Node* inputs[] = {reshape};
  Node* restored = rebuild_nodes(rewriter, reshape->next(), record.get(kActivation), inputs).back();
  rewriter.replace_all_uses(reshape, restored, /*except=*/restored);
  rewriter.erase(node);
  ctx.restored(restored);
}

}  // namespace fxopt
