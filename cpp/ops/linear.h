// Op view: a Linear layer, y = x W^T + b, in every dialect fx graphs use:
//   self.fc(x)                      call_module to a torch.nn.Linear   (symbolic_trace)
//   F.linear(x, self.w, self.b)     call_function torch._C._nn.linear  (symbolic_trace)
//   aten.linear.default(x, w, b)    call_function, weights as get_attr (torch.export(...).module())
// torch.export keeps nn.Linear as aten.linear.default unless the program is decomposed further
// (run_decompositions: aten.addmm / aten.mm with a permuted weight), which the view does not
// recognise. Weight and bias must be stored tensors: a module's own, or get_attr operands.
//
// The view's dialect also names the ops the Linear passes put next to a Linear (a slice of its
// output, its input extended by a ones column); ops/linear_rewrite.h builds them, so passes
// never look at the dialect themselves.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ir/trigger.h"
#include "ops/stored_params.h"

namespace fxopt {

// One way of spelling a Linear, with the ops of the same dialect built next to it.
struct LinearDialect {
  NodeKind kind;
  Symbol target;  // call_function target, or the module type for call_module
  Symbol slice;   // torch.narrow(x, dim, start, length) / aten.slice.Tensor(x, dim, start, end)
  Symbol pad;     // F.pad(x, (0, 1), value=1.0) / aten.constant_pad_nd(x, [0, 1], 1.0)
  bool aten;
};

struct LinearView {
  Node* node = nullptr;
  Node* input = nullptr;
  StoredParams params;  // "weight" (present) and "bias" (absent when None)
  TensorInfo weight;    // [out_features, in_features]
  TensorInfo bias;      // [out_features]; not present() when the Linear has none
  int64_t in_features = 0;
  int64_t out_features = 0;
  const LinearDialect* dialect = nullptr;

  bool has_bias() const { return bias.present(); }
  const std::string& dtype() const { return weight.dtype; }
  const std::string& device() const { return weight.device; }
  bool requires_grad() const { return weight.requires_grad; }
  // The module's path; empty when the tensors are get_attr operands.
  const std::string& module() const { return params.module; }
  // The get_attr nodes the operands were read from when the view was taken (nullptr: module
  // form, no bias); they stay valid after the pass rewires the node.
  Node* weight_node = nullptr;
  Node* bias_node = nullptr;
  // What the layer is called: the module path, or the weight's path without ".weight"
  // ("encoder.layer.0.attention.self.query"); its last component and the path around it.
  std::string owner() const;
  std::string short_name() const;
  std::string scope() const;
};

// Operand positions shared by nn.Linear.forward(input), F.linear and aten.linear.
inline constexpr size_t kLinearInput = 0, kLinearWeight = 1, kLinearBias = 2;

// Every (kind, target) that may be a Linear (for call_module: the module types).
std::vector<Trigger> linear_triggers();
// The view of `node`, or nullopt with `why_not` saying what does not fit.
std::optional<LinearView> as_linear(const Program& program, const Node& node,
                                    std::string* why_not = nullptr);
// True if the two are spelled the same way (dialect, target, module type), so one can be the
// template of a Linear that stands in for the other.
bool same_kind(const LinearView& a, const LinearView& b);
// True if the Linear's module or tensors are read by this node only, so a pass may replace or
// remove them; otherwise `why_not` names the sharing.
bool owns_tensors(const Program& program, const LinearView& view, std::string* why_not);
// Every Linear that computes with `view`'s module or stored tensors, `view` included, in graph
// order: the calls of its module, or the Linears whose weight and bias are read from the same
// paths. nullopt, with `why_not`, if anything else reads them.
std::optional<std::vector<LinearView>> call_sites(const Program& program, const LinearView& view,
                                                  std::string* why_not);

}  // namespace fxopt
