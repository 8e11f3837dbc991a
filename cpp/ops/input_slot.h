// Where an operand sits in a call: fx allows most operands positionally or by keyword, and a
// rewrite that swaps one operand must put the new value back in the same place.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "ir/node.h"

namespace fxopt {

struct InputSlot {
  size_t index = 0;     // position, when positional
  std::string keyword;  // keyword name; used when not positional
  bool positional = true;

  const Arg& read(const Node& node) const;
  // The node's args and kwargs with this slot holding `value`.
  std::pair<Args, Kwargs> write(const Node& node, Arg value) const;
};

// The slot of the operand at `index` / `keyword`, if the node passes it at all.
std::optional<InputSlot> find_slot(const Node& node, size_t index, std::string_view keyword);

// The node's args and kwargs with the operand at `index` / `keyword` set to `value`, or left out
// when `value` is nullopt. A new operand goes where fx would print it: positionally when it
// directly follows the positional arguments, else by keyword.
std::pair<Args, Kwargs> with_operand(const Node& node, size_t index, std::string_view keyword,
                                     std::optional<Arg> value);

}  // namespace fxopt
