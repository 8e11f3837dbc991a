#include "ops/activation.h"

#include <algorithm>

namespace fxopt {
namespace {

struct Form {
  std::string name;
  std::string module;  // class in torch.nn.modules.activation
  std::vector<std::string> functions;
  std::vector<std::string> methods;
  std::string aten;
  std::string approximate;  // GELU's approximate argument; empty for the others
  // Spellings of a clamp that are this activation only for the bounds below: nn.ReLU6 reaches
  // Dynamo graphs as F.hardtanh(x, 0.0, 6.0).
  std::vector<std::string> clamps;
  double low = 0, high = 0;
};

const std::vector<Form>& forms() {
  static const std::vector<Form> all = {
      {"relu",
       "ReLU",
       {"torch.relu", "torch.nn.functional.relu"},
       {"relu"},
       "aten.relu.default",
       ""},
      {"relu6",
       "ReLU6",
       {"torch.nn.functional.relu6"},
       {},
       "aten.relu6.default",
       "",
       {"torch.nn.functional.hardtanh", "aten.hardtanh.default"},
       0.0,
       6.0},
      {"gelu", "GELU", {"torch._C._nn.gelu"}, {}, "aten.gelu.default", "none"},
      {"gelu_tanh", "GELU", {"torch._C._nn.gelu"}, {}, "aten.gelu.default", "tanh"},
      {"silu", "SiLU", {"torch.nn.functional.silu"}, {}, "aten.silu.default", ""},
      {"sigmoid", "Sigmoid", {"torch.sigmoid"}, {"sigmoid"}, "aten.sigmoid.default", ""},
      {"tanh", "Tanh", {"torch.tanh"}, {"tanh"}, "aten.tanh.default", ""},
      {"mish", "Mish", {"torch.nn.functional.mish"}, {}, "aten.mish.default", ""},
      {"hardswish",
       "Hardswish",
       {"torch.nn.functional.hardswish"},
       {},
       "aten.hardswish.default",
       ""},
  };
  return all;
}

Symbol module_type(const Form& f) {
  return Symbol::intern("torch.nn.modules.activation." + f.module);
}

const Form* find_form(std::string_view name) {
  for (const Form& f : forms())
    if (f.name == name) return &f;
  return nullptr;
}

bool is_clamp(const Node& node, const Form& form) {
  return node.kind() == NodeKind::CallFunction &&
         std::ranges::find(form.clamps, node.target().str()) != form.clamps.end();
}

// hardtanh(x, min_val=-1, max_val=1, inplace=False) clamps to the form's bounds.
bool clamps_to_bounds(const Node& node, const Form& form) {
  const Arg* low = node.input(1, "min_val");
  const Arg* high = node.input(2, "max_val");
  return low && high && low->number() == form.low && high->number() == form.high;
}

// Whether `node` is spelled as one of `form`'s calls, ignoring GELU's approximation and the
// bounds of a clamp.
bool spelled_as(const Program& program, const Node& node, const Form& form, bool* aten) {
  *aten = false;
  if (is_clamp(node, form)) {
    *aten = node.target().str().starts_with("aten.");
    return true;
  }
  switch (node.kind()) {
    case NodeKind::CallModule: {
      const ModuleInfo* module = program.module(node.target());
      return module && module->type == module_type(form);
    }
    case NodeKind::CallMethod:
      return std::find(form.methods.begin(), form.methods.end(), node.target().str()) !=
             form.methods.end();
    case NodeKind::CallFunction:
      *aten = node.target().str() == form.aten;
      return *aten || std::find(form.functions.begin(), form.functions.end(),
                                node.target().str()) != form.functions.end();
    default:
      return false;
  }
}

// A module attribute or a call operand (position 1, or by keyword).
const Arg* option(const Program& program, const Node& node, std::string_view keyword) {
  if (node.kind() == NodeKind::CallModule) return program.module(node.target())->attribute(keyword);
  if (const Arg* kw = node.kwargs().find(keyword)) return kw;
  return node.args().size() > 1 ? &node.args()[1] : nullptr;
}

}  // namespace

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Form& f : forms()) out.push_back(f.name);
    return out;
  }();
  return names;
}

std::vector<Trigger> activation_triggers(std::string_view name) {
  const Form* f = find_form(name);
  if (!f) return {};
  std::vector<Trigger> triggers = {{NodeKind::CallModule, module_type(*f)},
                                   {NodeKind::CallFunction, Symbol::intern(f->aten)}};
  for (const std::string& t : f->functions)
    triggers.push_back({NodeKind::CallFunction, Symbol::intern(t)});
  for (const std::string& t : f->clamps)
    triggers.push_back({NodeKind::CallFunction, Symbol::intern(t)});
  for (const std::string& t : f->methods)
    triggers.push_back({NodeKind::CallMethod, Symbol::intern(t)});
  return triggers;
}

std::optional<Activation> as_activation(const Program& program, const Node& node,
                                        std::string* why_not) {
  for (const Form& form : forms()) {
    Activation act{form.name, nullptr, false, false};
    if (!spelled_as(program, node, form, &act.aten)) continue;
    bool clamp = is_clamp(node, form);
    if (clamp && !clamps_to_bounds(node, form)) continue;
    if (!form.approximate.empty()) {
      const Arg* approximate = option(program, node, "approximate");
      std::string value = approximate && approximate->is<std::string>()
                              ? approximate->as<std::string>()
                              : std::string("none");
      if (value != form.approximate) continue;
    }
    const Arg* in_place = clamp ? node.input(3, "inplace") : option(program, node, "inplace");
    act.in_place = in_place && *in_place == Arg(true);  // GELU's operand 1 is a string
    const Arg* input = node.input(0, "input");
    if (!input || !input->node()) {
      *why_not = "its input is not a tensor produced by the graph";
      return std::nullopt;
    }
    act.input = input->node();
    return act;
  }
  *why_not = "not a known activation";
  return std::nullopt;
}

ActivationCall activation_call(std::string_view name, Node* input, bool aten) {
  const Form& form = *find_form(name);
  ActivationCall call{NodeKind::CallFunction,
                      Symbol::intern(aten ? form.aten : form.functions.front()),
                      {input},
                      {}};
  if (form.approximate == "tanh") call.kwargs.set("approximate", "tanh");
  return call;
}

}  // namespace fxopt
