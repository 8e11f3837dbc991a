// The stored tensors a weighted op (Linear, Conv) computes with, in every dialect:
//   call_module:    the module's own tensors        %y = call_module[conv](%x)
//   call_function:  get_attr operands               %y = aten.conv2d(%x, %w, %b)
// How passes give such an op new ones, reversibly, is passes/replace_params.h.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ir/program.h"

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

}  // namespace fxopt
