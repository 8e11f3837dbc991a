#include "passes/change_activation.h"

#include <algorithm>
#include <stdexcept>

#include "ops/activation.h"
#include "rewrite/recorded_call.h"

namespace fxopt {
namespace {

void check_name(const std::string& name) {
  const std::vector<std::string>& names = activation_names();
  if (std::find(names.begin(), names.end(), name) != names.end()) return;
  std::string known;
  for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
  throw std::invalid_argument("unknown activation '" + name + "' (known: " + known + ")");
}

Node* data_operand(const Node& node) {
  const Arg* input = node.input(0, "input");
  if (!input || !input->node()) throw PassError(node, "its data operand is not a graph value");
  return input->node();
}

}  // namespace

ChangeActivation::ChangeActivation(std::string source, std::string target)
    : source_(std::move(source)), target_(std::move(target)) {
  check_name(source_);
  check_name(target_);
  if (source_ == target_) throw std::invalid_argument("source and target are both " + source_);
}

std::vector<Trigger> ChangeActivation::triggers() const { return activation_triggers(source_); }

void ChangeActivation::rewrite(PassContext& ctx, Node* node) const {
  std::string why_not;
  std::optional<Activation> act = as_activation(ctx.rewriter.program(), *node, &why_not);
  if (!act) return ctx.skip(*node, why_not);
  if (act->name != source_) return ctx.skip(*node, "computes " + act->name + ", not " + source_);
  if (act->in_place && act->input->users().size() > 1)
    return ctx.skip(*node, "works in place on a value other nodes read");
  Node* inputs[] = {act->input};
  std::optional<Record> record = record_call(*node, inputs);
  if (!record) return ctx.skip(*node, "reads values a reversal record cannot hold");
  ActivationCall call = activation_call(target_, act->input, act->aten);
  ctx.rewriter.set_target(node, call.kind, call.target);
  ctx.rewriter.set_inputs(node, std::move(call.args), std::move(call.kwargs));
  set_reversal_record(ctx.rewriter, node, ctx.signature, *record);
  ctx.changed(node);
}

void ChangeActivation::restore(PassContext& ctx, Node* node, const RecordReader& record) const {
  Node* inputs[] = {data_operand(*node)};
  restore_call(ctx.rewriter, node, record, inputs);
  ctx.restored(node);
}

}  // namespace fxopt
