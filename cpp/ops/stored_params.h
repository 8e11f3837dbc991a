// The stored tensors a weighted op (Linear, Conv) computes with, in every dialect, and the one
// way passes give such an op new ones:
//   call_module:    the module's own tensors        %y = call_module[conv](%x)
//   call_function:  get_attr operands               %y = aten.conv2d(%x, %w, %b)
//
// Replacing is copy-on-write: the originals are never changed or unregistered. The module form
// calls a copy of the module, registered at a new path; the functional forms read new
// attributes through new get_attr nodes. So the record `replace_params` returns holds only
// paths, and `restore_params` works after a deep copy or in a later bridge session, where tensor
// handles of this session mean nothing.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rewrite/rewriter.h"

namespace fxopt {

struct StoredParam {
  std::string name;  // "weight", "bias": the module's tensor name and the operand's keyword
  size_t index = 0;  // the operand's position in the functional forms
  const TensorInfo* tensor = nullptr;  // nullptr: absent (a None bias)
};

struct StoredParams {
  Node* node = nullptr;
  std::string module;  // path of the called module; empty in the functional forms
  std::vector<StoredParam> params;

  // The param called `name`, or nullptr if the op has no such operand.
  const StoredParam* find(std::string_view name) const;
  const TensorInfo* tensor(std::string_view name) const;
};

// The named operands (position, keyword) of `node`, read from its module or its get_attr
// operands. An operand that is None or not passed is absent; one the graph computes is not a
// stored tensor, and the result is nullopt with `why_not` saying which.
std::optional<StoredParams> read_stored_params(
    const Program& program, Node* node, const std::vector<std::pair<size_t, std::string>>& operands,
    std::string* why_not);

// Makes `params.node` compute with `tensors` (by param name) instead; the new module or
// attributes are named after the old ones plus `suffix`. Every new tensor takes the parameter
// flags (is_parameter, requires_grad) of the one it replaces, or of the weight when it replaces
// an absent one. Returns the reversal record.
Arg replace_params(Rewriter& rewriter, const StoredParams& params,
                   const std::map<std::string, TensorInfo>& tensors, std::string_view suffix);
// Undoes `replace_params` on `node` from its record; drops the module or attributes it created.
void restore_params(Rewriter& rewriter, Node* node, const Arg& record);

}  // namespace fxopt
