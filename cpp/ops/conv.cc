#include "ops/conv.h"

#include <array>

namespace fxopt {
namespace {

struct ModuleForm {
  Symbol type;
  bool transposed;
};

const std::array<ModuleForm, 6>& module_forms() {
  auto conv = [](const char* name) {
    return Symbol::intern(std::string("torch.nn.modules.conv.") + name);
  };
  static const std::array<ModuleForm, 6> forms = {{
      {conv("Conv1d"), false},
      {conv("Conv2d"), false},
      {conv("Conv3d"), false},
      {conv("ConvTranspose1d"), true},
      {conv("ConvTranspose2d"), true},
      {conv("ConvTranspose3d"), true},
  }};
  return forms;
}

struct FunctionForm {
  Symbol target;
  int transposed;  // 0 / 1, or -1: read the `transposed` operand (position 6)
  int groups;      // position of the groups operand
};

std::vector<FunctionForm> make_function_forms() {
  std::vector<FunctionForm> forms;
  for (const char* d : {"1d", "2d", "3d"}) {
    std::string conv = std::string("conv") + d, transposed = std::string("conv_transpose") + d;
    forms.push_back({Symbol::intern("torch." + conv), 0, 6});
    forms.push_back({Symbol::intern("torch." + transposed), 1, 6});
    forms.push_back({Symbol::intern("aten." + conv + ".default"), 0, 6});
    forms.push_back({Symbol::intern("aten." + conv + ".padding"), 0, 6});
    forms.push_back({Symbol::intern("aten." + transposed + ".input"), 1, 6});
  }
  forms.push_back({Symbol::intern("aten.convolution.default"), -1, 8});
  return forms;
}

const std::vector<FunctionForm>& function_forms() {
  static const std::vector<FunctionForm> forms = make_function_forms();
  return forms;
}

// Reads groups and transposition from the node's own operands.
bool read_function_form(const Node& node, const FunctionForm& form, Conv* conv,
                        std::string* why_not) {
  conv->transposed = form.transposed == 1;
  if (form.transposed < 0) {
    const Arg* transposed = node.input(6, "transposed");
    if (!transposed || !transposed->is<bool>()) {
      *why_not = "its transposed flag is not a constant";
      return false;
    }
    conv->transposed = transposed->as<bool>();
  }
  if (const Arg* groups = node.input(form.groups, "groups")) {
    if (!groups->integer()) {
      *why_not = "its groups is not a constant integer";
      return false;
    }
    conv->groups = *groups->integer();
  }
  return true;
}

// An int or int sequence operand as one value per spatial dimension (`fallback` if absent).
std::optional<std::vector<int64_t>> per_dim(const Arg* value, int dims, int64_t fallback) {
  if (!value) return std::vector<int64_t>(dims, fallback);
  if (std::optional<int64_t> one = value->integer()) return std::vector<int64_t>(dims, *one);
  const std::vector<Arg>* items = value->sequence();
  if (!items || (items->size() != 1 && int(items->size()) != dims)) return std::nullopt;
  std::vector<int64_t> out;
  for (const Arg& item : *items) {
    std::optional<int64_t> i = item.integer();
    if (!i) return std::nullopt;
    out.push_back(*i);
  }
  if (out.size() == 1) out.assign(dims, out[0]);
  return out;
}

}  // namespace

std::optional<ConvGeometry> conv_geometry(const Program& program, const Conv& conv,
                                          std::string* why_not) {
  if (conv.transposed) {
    *why_not = "it is a transposed convolution";
    return std::nullopt;
  }
  const Node& node = *conv.params.node;
  auto operand = [&](size_t index, std::string_view name) -> const Arg* {
    if (node.kind() != NodeKind::CallModule) return node.input(index, name);
    return program.module(node.target())->attribute(name);
  };
  if (node.kind() == NodeKind::CallModule) {
    const Arg* mode = operand(0, "padding_mode");
    if (mode && *mode != Arg("zeros")) {
      *why_not = "its padding mode is not zeros";
      return std::nullopt;
    }
  }
  std::optional<std::vector<int64_t>> stride = per_dim(operand(3, "stride"), conv.spatial_dims, 1);
  std::optional<std::vector<int64_t>> padding =
      per_dim(operand(4, "padding"), conv.spatial_dims, 0);
  std::optional<std::vector<int64_t>> dilation =
      per_dim(operand(5, "dilation"), conv.spatial_dims, 1);
  if (!stride || !padding || !dilation) {
    *why_not = "its stride, padding or dilation is not constant integers";
    return std::nullopt;
  }
  return ConvGeometry{std::move(*stride), std::move(*padding), std::move(*dilation)};
}

std::vector<Trigger> conv_triggers() {
  std::vector<Trigger> triggers;
  for (const ModuleForm& f : module_forms()) triggers.push_back({NodeKind::CallModule, f.type});
  for (const FunctionForm& f : function_forms())
    triggers.push_back({NodeKind::CallFunction, f.target});
  return triggers;
}

std::optional<Conv> as_conv(const Program& program, Node* node, std::string* why_not) {
  Conv conv;
  bool recognised = false;
  if (node->kind() == NodeKind::CallModule) {
    const ModuleInfo* module = program.module(node->target());
    for (const ModuleForm& form : module_forms()) {
      if (!module || module->type != form.type) continue;
      recognised = true;
      conv.transposed = form.transposed;
      if (const Arg* groups = module->attribute("groups"); groups && groups->integer())
        conv.groups = *groups->integer();
    }
  } else if (node->kind() == NodeKind::CallFunction) {
    for (const FunctionForm& form : function_forms()) {
      if (node->target() != form.target) continue;
      if (!read_function_form(*node, form, &conv, why_not)) return std::nullopt;
      recognised = true;
    }
  }
  if (!recognised) {
    *why_not = "not a convolution";
    return std::nullopt;
  }
  const Arg* input = node->input(0, "input");
  if (!input || !input->node()) {
    *why_not = "its input is not a tensor produced by the graph";
    return std::nullopt;
  }
  conv.input = input->node();
  std::optional<StoredParams> params =
      read_stored_params(program, node, {{1, "weight"}, {2, "bias"}}, why_not);
  if (!params) return std::nullopt;
  conv.params = std::move(*params);
  const TensorInfo* weight = conv.params.tensor("weight");
  if (!weight || weight->shape.size() < 3 || weight->shape.size() > 5 || conv.groups < 1) {
    *why_not = "its weight is not a stored 3-D to 5-D tensor";
    return std::nullopt;
  }
  conv.spatial_dims = int(weight->shape.size()) - 2;
  return conv;
}

}  // namespace fxopt
