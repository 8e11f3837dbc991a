// Op view: an elementwise activation without parameters, in every dialect, and the call that
// computes another activation in the same dialect. Activations by name:
//   name       module            torch function / method          ATen (torch.export)
//   relu       nn.ReLU           torch.relu, F.relu, x.relu()     aten.relu.default
//   relu6      nn.ReLU6          F.relu6, F.hardtanh(x, 0, 6)     aten.relu6.default,
//                                                                  aten.hardtanh.default(x, 0, 6)
//   gelu       nn.GELU()         F.gelu(x)                        aten.gelu.default(x)
//   gelu_tanh  nn.GELU('tanh')   F.gelu(x, approximate='tanh')    aten.gelu.default(x, approximate='tanh')
//   silu       nn.SiLU           F.silu                           aten.silu.default
//   sigmoid    nn.Sigmoid        torch.sigmoid, x.sigmoid()       aten.sigmoid.default
//   tanh       nn.Tanh           torch.tanh, x.tanh()             aten.tanh.default
//   mish       nn.Mish           F.mish                           aten.mish.default
//   hardswish  nn.Hardswish      F.hardswish                      aten.hardswish.default
// Modules, torch functions and methods (symbolic traces) get a torch function in their place;
// ATen calls (torch.export) an ATen call.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/trigger.h"

namespace fxopt {

struct Activation {
  std::string name;       // one of activation_names()
  Node* input = nullptr;  // the data operand
  bool in_place = false;  // nn.ReLU(inplace=True), F.relu(x, inplace=True)
  bool aten = false;      // an ATen call: its replacement is one too
};

// A call that computes an activation: what a node becomes.
struct ActivationCall {
  NodeKind kind;
  Symbol target;
  Args args;
  Kwargs kwargs;
};

const std::vector<std::string>& activation_names();
// Every (kind, target) that may compute activation `name`; call_module triggers name types.
std::vector<Trigger> activation_triggers(std::string_view name);
// The view of `node`, or nullopt with `why_not` saying what does not fit.
std::optional<Activation> as_activation(const Program& program, const Node& node,
                                        std::string* why_not);
// `name` of `input` as an ATen call (aten) or a torch function call (otherwise).
ActivationCall activation_call(std::string_view name, Node* input, bool aten);

}  // namespace fxopt
