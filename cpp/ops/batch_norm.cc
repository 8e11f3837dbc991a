#include "ops/batch_norm.h"

#include <array>

namespace fxopt {
namespace {

struct ModuleForm {
  Symbol type;
  int dims;
  std::vector<int> ranks;
};

const std::array<ModuleForm, 3>& module_forms() {
  static const std::array<ModuleForm, 3> forms = {{
      {Symbol::intern("torch.nn.modules.batchnorm.BatchNorm1d"), 1, {2, 3}},
      {Symbol::intern("torch.nn.modules.batchnorm.BatchNorm2d"), 2, {4}},
      {Symbol::intern("torch.nn.modules.batchnorm.BatchNorm3d"), 3, {5}},
  }};
  return forms;
}

// Operand positions of a functional form; -1 where the form has no such operand.
struct FunctionForm {
  Symbol target;
  int weight, bias, mean, var, training, eps;
  bool tuple_result;  // returns (output, save_mean, save_invstd)
};

const std::array<FunctionForm, 5>& function_forms() {
  static const std::array<FunctionForm, 5> forms = {{
      {Symbol::intern("torch.nn.functional.batch_norm"), 3, 4, 1, 2, 5, 7, false},
      {Symbol::intern("aten.batch_norm.default"), 1, 2, 3, 4, 5, 7, false},
      {Symbol::intern("aten._native_batch_norm_legit_no_training.default"), 1, 2, 3, 4, -1, 6,
       true},
      {Symbol::intern("aten._native_batch_norm_legit.default"), 1, 2, 3, 4, 5, 7, true},
      {Symbol::intern("aten.native_batch_norm.default"), 1, 2, 3, 4, 5, 7, true},
  }};
  return forms;
}

const Symbol kGetItem = Symbol::intern("_operator.getitem");

const char* const kTrainingMode =
    "is in training mode: it normalizes with the statistics of each batch";
const char* const kNoRunningStats = "keeps no running statistics (track_running_stats=False)";

std::optional<BatchNorm> from_module(const Program& program, Node* node, const ModuleForm& form,
                                     std::string* why_not) {
  const ModuleInfo* module = program.module(node->target());
  BatchNorm bn;
  bn.node = bn.result = node;
  if (const Arg* training = module->attribute("training"); training && *training == Arg(true)) {
    *why_not = kTrainingMode;
    return std::nullopt;
  }
  const TensorInfo* mean = module->tensor("running_mean");
  const TensorInfo* var = module->tensor("running_var");
  if (const Arg* track = module->attribute("track_running_stats");
      (track && *track == Arg(false)) || !mean || !mean->present() || !var || !var->present()) {
    *why_not = kNoRunningStats;
    return std::nullopt;
  }
  bn.stats.mean = *mean;
  bn.stats.var = *var;
  if (const TensorInfo* w = module->tensor("weight"); w && w->present()) bn.stats.weight = *w;
  if (const TensorInfo* b = module->tensor("bias"); b && b->present()) bn.stats.bias = *b;
  if (const Arg* eps = module->attribute("eps"); eps && eps->number())
    bn.stats.eps = *eps->number();
  bn.ranks = form.ranks;
  return bn;
}

// The stored tensor an operand reads, nullopt for None / not passed; false if it is computed.
bool read_stored(const Program& program, const Node& node, int index, const char* keyword,
                 std::optional<TensorInfo>* out) {
  const Arg* operand = index < 0 ? nullptr : node.input(index, keyword);
  if (!operand || operand->is_none()) return true;
  Node* read = operand->node();
  const TensorInfo* t =
      read && read->kind() == NodeKind::GetAttr ? program.attribute(read->target()) : nullptr;
  if (t) *out = *t;
  return t != nullptr;
}

// The getitem(node, 0) that carries a tuple-returning form's result, if it is its only use.
Node* sole_first_item(const Node& node) {
  if (node.users().size() != 1) return nullptr;
  Node* user = node.users().front();
  bool first = user->is(NodeKind::CallFunction, kGetItem) && user->args().size() == 2 &&
               user->args()[1] == Arg(0);
  return first ? user : nullptr;
}

std::optional<BatchNorm> from_function(const Program& program, Node* node, const FunctionForm& form,
                                       std::string* why_not) {
  BatchNorm bn;
  bn.node = bn.result = node;
  if (form.training >= 0) {
    const Arg* training = node->input(form.training, "training");
    if (training && !(training->is<bool>() && !training->as<bool>())) {
      *why_not = training->is<bool>() ? kTrainingMode : "its training flag is not a constant";
      return std::nullopt;
    }
  }
  std::optional<TensorInfo> mean, var;
  if (!read_stored(program, *node, form.mean, "running_mean", &mean) ||
      !read_stored(program, *node, form.var, "running_var", &var) ||
      !read_stored(program, *node, form.weight, "weight", &bn.stats.weight) ||
      !read_stored(program, *node, form.bias, "bias", &bn.stats.bias)) {
    *why_not = "its statistics or affine parameters are not stored tensors";
    return std::nullopt;
  }
  if (!mean || !var) {
    *why_not = kNoRunningStats;
    return std::nullopt;
  }
  bn.stats.mean = *mean;
  bn.stats.var = *var;
  if (const Arg* eps = node->input(form.eps, "eps")) {
    if (!eps->number()) {
      *why_not = "its eps is not a constant number";
      return std::nullopt;
    }
    bn.stats.eps = *eps->number();
  }
  if (form.tuple_result && !(bn.result = sole_first_item(*node))) {
    *why_not = "uses the batch statistics it also returns";
    return std::nullopt;
  }
  return bn;
}

}  // namespace

std::vector<Node*> BatchNorm::nodes() const {
  if (result == node) return {node};
  return {node, result};
}

std::vector<Trigger> batch_norm_triggers(int module_dims) {
  std::vector<Trigger> triggers;
  for (const ModuleForm& f : module_forms())
    if (module_dims == 0 || f.dims == module_dims)
      triggers.push_back({NodeKind::CallModule, f.type});
  for (const FunctionForm& f : function_forms())
    triggers.push_back({NodeKind::CallFunction, f.target});
  return triggers;
}

std::optional<BatchNorm> as_batch_norm(const Program& program, Node* node, std::string* why_not) {
  std::optional<BatchNorm> bn;
  if (node->kind() == NodeKind::CallModule) {
    const ModuleInfo* module = program.module(node->target());
    for (const ModuleForm& form : module_forms())
      if (module && module->type == form.type) bn = from_module(program, node, form, why_not);
  } else if (node->kind() == NodeKind::CallFunction) {
    for (const FunctionForm& form : function_forms())
      if (node->target() == form.target) bn = from_function(program, node, form, why_not);
  }
  if (!bn) {
    if (why_not->empty()) *why_not = "not a batch norm";
    return std::nullopt;
  }
  const Arg* input = node->input(0, "input");
  if (!input || !input->node()) {
    *why_not = "its input is not a tensor produced by the graph";
    return std::nullopt;
  }
  bn->input = input->node();
  return bn;
}

}  // namespace fxopt
