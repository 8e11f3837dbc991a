#include "ops/no_op.h"

#include <algorithm>

#include "ops/attention.h"
#include "ops/dtype_flow.h"
#include "ops/effects.h"
#include "ops/reshape.h"

namespace fxopt {
namespace {

enum class Form { Dropout, Identity, Clone, Alias, Contiguous, Cast, Copy, Reshape, Expand };

struct Spelling {
  NodeKind kind;
  const char* target;  // module type for call_module
  Form form;
};

constexpr Spelling kSpellings[] = {
    {NodeKind::CallModule, "torch.nn.modules.dropout.Dropout", Form::Dropout},
    {NodeKind::CallFunction, "torch.nn.functional.dropout", Form::Dropout},
    {NodeKind::CallFunction, "torch.dropout", Form::Dropout},
    {NodeKind::CallFunction, "aten.dropout.default", Form::Dropout},
    {NodeKind::CallModule, "torch.nn.modules.linear.Identity", Form::Identity},
    {NodeKind::CallMethod, "clone", Form::Clone},
    {NodeKind::CallFunction, "torch.clone", Form::Clone},
    {NodeKind::CallFunction, "aten.clone.default", Form::Clone},
    {NodeKind::CallMethod, "detach", Form::Alias},
    {NodeKind::CallFunction, "torch.detach", Form::Alias},
    {NodeKind::CallFunction, "aten.detach.default", Form::Alias},
    {NodeKind::CallFunction, "aten.alias.default", Form::Alias},
    {NodeKind::CallMethod, "contiguous", Form::Contiguous},
    {NodeKind::CallMethod, "to", Form::Cast},
    {NodeKind::CallMethod, "type_as", Form::Cast},
    {NodeKind::CallMethod, "float", Form::Cast},
    {NodeKind::CallMethod, "double", Form::Cast},
    {NodeKind::CallMethod, "half", Form::Cast},
    {NodeKind::CallMethod, "bfloat16", Form::Cast},
    {NodeKind::CallFunction, "aten.to.dtype", Form::Cast},
    {NodeKind::CallFunction, "aten.to.dtype_layout", Form::Cast},
    {NodeKind::CallFunction, "aten.to.device", Form::Cast},
    {NodeKind::CallFunction, "aten.to.other", Form::Cast},
    {NodeKind::CallFunction, "aten._to_copy.default", Form::Copy},
    {NodeKind::CallMethod, "view", Form::Reshape},
    {NodeKind::CallMethod, "reshape", Form::Reshape},
    {NodeKind::CallFunction, "torch.reshape", Form::Reshape},
    {NodeKind::CallFunction, "aten.view.default", Form::Reshape},
    {NodeKind::CallFunction, "aten.reshape.default", Form::Reshape},
    {NodeKind::CallFunction, "aten._unsafe_view.default", Form::Reshape},
    {NodeKind::CallMethod, "expand", Form::Expand},
    {NodeKind::CallFunction, "aten.expand.default", Form::Expand},
};

std::optional<Form> form_of(const Program& program, const Node& node) {
  Symbol target = node.target();
  if (node.kind() == NodeKind::CallModule) {
    const ModuleInfo* module = program.module(target);
    if (!module) return std::nullopt;
    target = module->type;
  }
  for (const Spelling& s : kSpellings)
    if (s.kind == node.kind() && target.str() == s.target) return s.form;
  return std::nullopt;
}

Node* data_operand(const Node& node) {
  const Arg* a = node.input(0, node.kind() == NodeKind::CallMethod ? "self" : "input");
  return a ? a->node() : nullptr;
}

bool passes_memory_format(const Node& node) {
  const Arg* format = node.kwargs().find("memory_format");
  return format && !format->is_none();
}

// Ops whose result is a fresh contiguous tensor, so .contiguous() after them returns it as is.
bool contiguous_producer(const Program& program, const Node& node) {
  std::string_view name = op_name(program, node);
  if (node.kind() == NodeKind::CallModule) return name == "Linear" || name == "Embedding";
  return name == "linear" || name == "matmul" || name == "mm" || name == "bmm" || name == "addmm" ||
         name == "baddbmm" || name == "embedding" || name == "contiguous";
}

// A cast whose result has its input's dtype and device.
bool same_dtype_and_device(const Program& program, const ValueDtypes& dtypes, const Node& node,
                           const Node& input, bool* copies, std::string* why_not) {
  std::string_view to = explicit_result_dtype(program, node);
  if (to.empty()) to = dtypes.of(&node);
  std::string_view from = dtypes.of(&input);
  if (to.empty() || from.empty()) {
    *why_not =
        "the dtypes it casts between are not recorded (trace with torch.export, or run "
        "ShapeProp)";
    return false;
  }
  if (to != from) {
    *why_not = "casts " + std::string(from) + " to " + std::string(to);
    return false;
  }
  // Anything but the input, dtypes and flags may name a device (or a tensor to follow).
  bool may_move = node.kind() == NodeKind::CallMethod && node.target().str() == "type_as";
  for (size_t i = 1; i < node.args().size(); ++i) {
    const Arg& a = node.args()[i];
    if (a.is<bool>())
      *copies |= a.as<bool>();  // to(..., non_blocking, copy): assume a copy
    else if (program.dtype_of(a).empty() && !a.is_none())
      may_move = true;
  }
  for (const auto& [key, value] : node.kwargs().items) {
    if (key == "copy")
      *copies |= value == Arg(true);
    else if (key != "dtype" && key != "non_blocking" && key != "memory_format" && !value.is_none())
      may_move = true;
  }
  if (may_move && (node.device().empty() || node.device() != input.device())) {
    *why_not = node.device().empty() || input.device().empty()
                   ? "may move the value to another device, and the devices are not recorded"
                   : "moves the value from " + input.device() + " to " + node.device();
    return false;
  }
  return true;
}

// The static shape a reshape or expand asks for: the recorded one, else the literal sizes.
std::optional<std::vector<int64_t>> requested_shape(const Node& node, const Node& input,
                                                    bool expand) {
  if (node.rank()) return node.shape();
  std::vector<Arg> items;
  if (node.args().size() == 2 && node.args()[1].sequence())
    items = *node.args()[1].sequence();
  else
    items.assign(node.args().begin() + 1, node.args().end());
  std::vector<int64_t> shape;
  for (size_t i = 0; i < items.size(); ++i) {
    std::optional<int64_t> size = items[i].integer();
    if (!size) return std::nullopt;
    // expand keeps a dim given as -1; a reshape's -1 is inferred, which needs the element count.
    if (*size == -1 && expand && input.rank() && items.size() == size_t(*input.rank()))
      size = input.shape()[i];
    shape.push_back(*size);
  }
  return shape;
}

bool same_shape(const Node& node, const Node& input, bool expand, std::string* why_not) {
  const std::vector<int64_t>& in = input.shape();
  std::optional<std::vector<int64_t>> out = requested_shape(node, input, expand);
  bool in_static =
      input.rank() && std::all_of(in.begin(), in.end(), [](int64_t d) { return d >= 0; });
  if (!in_static || !out ||
      std::any_of(out->begin(), out->end(), [](int64_t d) { return d < 0; })) {
    *why_not = "its input's or result's shape is not recorded with static sizes";
    return false;
  }
  if (*out != in) {
    *why_not = "changes the shape";
    return false;
  }
  return true;
}

}  // namespace

std::vector<Trigger> no_op_triggers() {
  std::vector<Trigger> triggers;
  for (const Spelling& s : kSpellings) triggers.push_back({s.kind, Symbol::intern(s.target)});
  return triggers;
}

std::optional<NoOp> as_no_op(const Program& program, const ValueDtypes& dtypes, const Node& node,
                             std::string* why_not) {
  std::optional<Form> form = form_of(program, node);
  if (!form) return std::nullopt;
  if (*form == Form::Dropout) {
    std::optional<Dropout> dropout = as_dropout(program, node);
    if (!dropout) return std::nullopt;
    if (!dropout->identity) {
      *why_not = "dropout in training mode (or training unknown) with p > 0";
      return std::nullopt;
    }
    return NoOp{dropout->input, false};
  }
  Node* input = *form == Form::Reshape ? reshape_source(node) : data_operand(node);
  if (!input) {
    *why_not = *form == Form::Reshape ? "is not a reshape to given sizes"
                                      : "its input is not a graph value";
    return std::nullopt;
  }
  bool copies = *form == Form::Clone || *form == Form::Copy;
  if (passes_memory_format(node)) {
    *why_not = "may change the memory format";
    return std::nullopt;
  }
  switch (*form) {
    case Form::Identity:
    case Form::Clone:
    case Form::Alias:
      break;
    case Form::Contiguous:
      if (!contiguous_producer(program, *input)) {
        *why_not =
            "its input may not be contiguous (only Linear, matmul and embedding results "
            "are known to be)";
        return std::nullopt;
      }
      break;
    case Form::Cast:
    case Form::Copy:
      if (!same_dtype_and_device(program, dtypes, node, *input, &copies, why_not))
        return std::nullopt;
      break;
    case Form::Reshape:
    case Form::Expand:
      if (!same_shape(node, *input, *form == Form::Expand, why_not)) return std::nullopt;
      break;
    case Form::Dropout:
      break;
  }
  return NoOp{input, copies};
}

}  // namespace fxopt
