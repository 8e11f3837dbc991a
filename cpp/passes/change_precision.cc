#include "passes/change_precision.h"

#include <stdexcept>

#include "ops/cast.h"
#include "ops/conv.h"
#include "ops/input_slot.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/stored_params.h"

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

}  // namespace

ChangePrecision::ChangePrecision(std::string dtype, Arg dtype_object)
    : dtype_(std::move(dtype)), dtype_object_(std::move(dtype_object)) {
  if (dtype_ != "float16" && dtype_ != "bfloat16")
    throw std::invalid_argument("ChangePrecision takes float16 or bfloat16, not " + dtype_);
}

std::vector<Trigger> ChangePrecision::triggers() const {
  std::vector<Trigger> triggers = linear_triggers();
  for (const auto& more : {conv_triggers(), matmul_triggers()})
    triggers.insert(triggers.end(), more.begin(), more.end());
  return triggers;
}

void ChangePrecision::rewrite(PassContext& ctx, Node* node) const {
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
    record.set("params", replace_params(rewriter, *work->params, low, dtype_));
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
  record.set("casts", std::move(casts));
  set_reversal_record(rewriter, node, ctx.signature, record);
  ctx.changed(node);
}

void ChangePrecision::restore(PassContext& ctx, Node* node, const Record& record) const {
  Rewriter& rewriter = ctx.rewriter;
  if (const Arg* params = record.get("params")) restore_params(rewriter, node, *params);
  const std::vector<Arg>* casts = record.at("casts").sequence();
  if (!casts) throw PassError(*node, "malformed precision record");
  for (const Arg& entry : *casts) {
    const std::vector<Arg>* e = entry.sequence();
    if (!e || e->size() != 2 || !(*e)[0].integer() || !(*e)[1].is<std::string>())
      throw PassError(*node, "malformed precision record");
    Operand operand{size_t(*(*e)[0].integer()), (*e)[1].as<std::string>()};
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
